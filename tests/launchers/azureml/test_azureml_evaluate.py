"""``task=evaluate`` on Azure ML: the model is the job's input, either a local
.h5 file (the SDK uploads it) or an earlier Azure ML job's outputs
(``azureml://jobs/<name>/outputs/run_dir``); the scores come home as
evaluation.json and the accuracy is the launch's result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import assert_ok, error_lines, run_cli
from helpers.fake_azureml.fixtures import aml_env, aml_overrides
from helpers.fake_azureml.small_data import small_data

pytestmark = (
    pytest.mark.horovod
)  # the job's environment trains on Horovod (engine=auto: horovod), which the fake nodes run here


@pytest.fixture(scope="module")
def untrained_model(tmp_path_factory) -> Path:
    """The seed CNN, saved untrained: scoring it is what these tests need, not accuracy."""
    path = tmp_path_factory.mktemp("model") / "seed_cnn.h5"
    code = "import sys; from cifar_dist.models.seed_cnn import build; build().save(sys.argv[1])"
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=env, timeout=300)
    return path


def _evaluate(fake, tmp_path, cache, model: str):
    run_dir = tmp_path / "scores"
    extra = {**small_data(tmp_path), "task": "evaluate", "evaluate.model": model}
    proc = run_cli(*aml_overrides(fake, run_dir, cache, **extra), env=aml_env(fake), cwd=tmp_path, timeout=300)
    assert_ok(proc)
    scores = json.loads((run_dir / "evaluation.json").read_text())
    assert scores["samples"] == 32 and 0.0 <= scores["accuracy"] <= 1.0
    (create,) = fake.job_creates()
    return json.loads(create.body)["properties"], proc


def test_evaluate_a_local_model_file(fake_aml, snapshot_cache, tmp_path, untrained_model):
    props, _ = _evaluate(fake_aml, tmp_path, snapshot_cache, str(untrained_model))
    model = props["inputs"]["model"]
    assert model["jobInputType"] == "uri_file" and "/paths/LocalUpload/" in model["uri"]
    assert "evaluate.model=${{inputs.model}}" in props["command"]
    assert str(untrained_model) not in props["command"]  # the node reads its own mount, not our path


@pytest.mark.slow  # the same scoring run as above; only where the model comes from differs
def test_evaluate_an_earlier_azureml_runs_outputs(fake_aml, snapshot_cache, tmp_path, untrained_model):
    earlier = fake_aml.state.node_root / "cifar_dist-earlier-0" / "outputs" / "run_dir" / "saved_models"
    earlier.mkdir(parents=True)
    (earlier / "keras_cifar10_trained_model.h5").write_bytes(untrained_model.read_bytes())
    uri = "azureml://jobs/cifar_dist-earlier-0/outputs/run_dir"
    props, _ = _evaluate(fake_aml, tmp_path, snapshot_cache, uri)
    assert props["inputs"]["model"]["uri"] == uri and props["inputs"]["model"]["jobInputType"] == "uri_folder"


def test_a_missing_local_model_is_one_line_before_anything_is_sent(fake_aml, snapshot_cache, tmp_path):
    extra = {"task": "evaluate", "evaluate.model": str(tmp_path / "nope.h5")}
    proc = run_cli(
        *aml_overrides(fake_aml, tmp_path / "scores", snapshot_cache, **extra),
        env=aml_env(fake_aml),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "nope.h5: no such file or directory" in line and "azureml://jobs/<name>/outputs/run_dir" in line
    assert fake_aml.requests == []
