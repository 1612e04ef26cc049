"""A run that names no engine, where Horovod is not installed (the current stack): real processes.

On the current stack Horovod is absent; on the horovod stack these tests make
it unimportable for the command they start (``without_horovod``: a
``sitecustomize`` that marks the module missing, as an uninstalled one is).
Either way: the default command trains in one process on TensorFlow alone,
says which engine and why (log, ``.hydra/config.yaml``, ``metrics.json``) and
a resume keeps that engine, even where Horovod is back; ``engine=horovod`` is
refused in one line that says how to get Horovod, with no run dir left
behind. (Several processes train on TensorFlow too, their gradients averaged
over MPI: tests/training/test_engine_tensorflow.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers.cli import assert_ok, one_error_line, read_metrics, run_cli, tiny_cifar
from helpers.fake_azureml.fixtures import aml_env, aml_overrides
from helpers.no_horovod import env_without_horovod

pytestmark = pytest.mark.both_stacks

FAST = ("data=sample", "trainer.epochs=1", "trainer.plot=false", "trainer.verbose=0", "trainer.batch_size=64")


def trains_fast(tiny_data) -> tuple:
    """FAST on tiny_data, for the runs that train: the engine, its reasons and the files are asserted, not learning."""
    return (*tiny_cifar(tiny_data), *FAST[1:])


@pytest.fixture(scope="module")
def without_horovod(tmp_path_factory) -> dict:
    """The environment of a command for which Horovod is not installed (a no-op where it is not)."""
    return env_without_horovod(tmp_path_factory.mktemp("no-horovod"))


def saved_engine(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["engine"]


def test_the_default_command_trains_on_tensorflow_and_a_resume_keeps_it(without_horovod, tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    assert_ok(run_cli(*trains_fast(tiny_data), f"hydra.run.dir={run_dir}", env=without_horovod))
    metrics = read_metrics(run_dir)
    assert metrics["run"]["engine"] == "tensorflow" and "horovod" not in metrics["run"]
    assert "Horovod is not installed; one process" in metrics["run"]["engine_reason"]
    assert saved_engine(run_dir)["name"] == "tensorflow" and saved_engine(run_dir)["keras"] == 2
    assert "engine: tensorflow (engine=auto: Horovod is not installed" in (run_dir / "cifar_dist.log").read_text()
    assert (run_dir / "checkpoints" / "checkpoint-001.h5").is_file()  # a Keras 2 model, as on Horovod
    # One more epoch, in this environment as it is (Horovod back, on the horovod stack): the checkpoints' engine.
    assert_ok(run_cli(*trains_fast(tiny_data), "trainer.epochs=2", f"hydra.run.dir={run_dir}"))
    metrics = read_metrics(run_dir)
    assert metrics["run"]["engine"] == "tensorflow" and metrics["resumed_from_epoch"] == 1
    assert "checkpoints were trained on engine=tensorflow" in metrics["run"]["engine_reason"]
    assert len(metrics["epochs"]) == 2


def test_engine_horovod_is_refused_in_one_line_saying_how_to_get_it(without_horovod, tmp_path):
    run_dir = tmp_path / "run"
    line = one_error_line(run_cli(*FAST, "engine=horovod", f"hydra.run.dir={run_dir}", env=without_horovod))
    assert "engine=horovod: Horovod is not installed" in line and "CIFAR_DIST_STACK=horovod" in line
    assert not run_dir.exists()


def test_an_azure_ml_job_names_horovod_because_its_launcher_builds_the_jobs_environment(
    without_horovod, fake_aml, snapshot_cache, tmp_path
):
    """Azure ML's job runs in the image its launcher builds, with Horovod, whatever this machine has."""
    run_dir = tmp_path / "run"
    env = aml_env(fake_aml)
    env["PYTHONPATH"] = without_horovod["PYTHONPATH"]
    overrides = aml_overrides(fake_aml, run_dir, snapshot_cache, **{"launcher.dry_run": "true"})
    assert_ok(run_cli(*overrides, env=env, cwd=tmp_path, timeout=60))
    engine = saved_engine(run_dir)
    assert engine["name"] == "horovod"
    assert engine["why"] == "engine=auto: the launcher builds the job's environment, with Horovod"
