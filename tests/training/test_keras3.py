"""Keras 3 models (``import keras``) on the Horovod engine: real ranks, real Keras 3, real Horovod.

A user's module written as Keras' own guides write it today (``import keras``,
a registered custom layer, Dropout, BatchNormalization) trains on 2 mpirun ranks
that see different data and ends with identical weights (Horovod averages the
gradients through the engine's Keras 3 optimizer wrapper); checkpoints are
Keras 3's own ``.keras`` files; a kill -9 resumes with the same batches, bit for
bit with trainer.deterministic; evaluate and batch-score read the run; MLflow
records its epochs; the same model runs as a 2-task job on the tests' real Slurm;
and what cannot train says so in one line before any data is read.
"""

from __future__ import annotations

import csv
import importlib
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from helpers.cli import (
    assert_ok,
    cli_env,
    compose_cfg,
    one_error_line,
    read_metrics,
    run_as_two_task_slurm_job,
    run_cli,
    straight_and_killed_runs,
    tiny_cifar,
)
from helpers.keras3_project import MODEL

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.horovod,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed"),
    pytest.mark.xdist_group("keras3"),  # one worker trains two_rank_run (make test: --dist loadgroup)
]

OPTIONS = (
    "--config-dir",
    "myconf",
    "model=k3",
    "trainer.batch_size=64",
    "trainer.plot=false",
    "trainer.tensorboard=false",
    "trainer.verbose=0",
)
RUN = (*OPTIONS, "data=sample")


@pytest.fixture(scope="module")
def tiny_run(tiny_data) -> tuple:
    """RUN on ``tiny_data``: for the runs whose assertions do not depend on how much is learnt."""
    return (*OPTIONS, *tiny_cifar(tiny_data))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("k3project")
    (folder / "mymodels3.py").write_text(MODEL)
    for name, target in (("k3", "build"), ("mixed", "mixed"), ("unsaveable", "unsaveable")):
        (folder / "myconf" / "model").mkdir(parents=True, exist_ok=True)
        (folder / "myconf" / "model" / f"{name}.yaml").write_text(f"_target_: mymodels3.{target}\n")
    return folder


@pytest.fixture
def importable_project(project, monkeypatch):
    """The project's folder on sys.path, as a run started from it has it; its module forgotten afterwards."""
    monkeypatch.syspath_prepend(str(project))
    yield project
    sys.modules.pop("mymodels3", None)


STORE = "mlflow.db"  # beside two_rank_run's run dir


@pytest.fixture(scope="module")
def two_rank_run(project, tiny_run, tmp_path_factory):
    """2 ranks, 2 epochs on tiny_data, tracked in MLflow (a SQLite store beside the run dir) where it is installed:
    test_a_keras3_run_is_tracked_in_mlflow reads what rank 0's Keras 3 callback logged, without a run of its own."""
    run_dir = tmp_path_factory.mktemp("k3-two") / "run"
    tracked = importlib.util.find_spec("mlflow") is not None
    tracking = ("tracking=mlflow", f"tracking.uri=sqlite:///{run_dir.parent / STORE}") if tracked else ()
    proc = run_cli(
        *tiny_run,
        "trainer.epochs=2",
        "trainer.epoch_policy=shard",
        "launcher=mpirun",
        "launcher.np=2",
        *tracking,
        f"hydra.run.dir={run_dir}",
        cwd=project,
        timeout=600,
    )
    assert_ok(proc)
    return run_dir


def test_two_ranks_on_different_data_end_with_identical_weights(two_rank_run):
    m = read_metrics(two_rank_run)
    assert m["ranks"] == 2 and m["complete"]
    assert m["run"]["keras"].startswith("3.") and m["run"]["engine"] == "horovod"
    # shard: each rank trains on its own half of the images every epoch; only averaged gradients
    # (and rank 0's initial weights) can make the two end alike.
    assert m["run"]["steps_per_epoch"] == 256 // 2 // 64  # tiny_data's 256 images
    assert len(m["rank_weight_digests"]) == 2 and m["ranks_in_sync"] is True
    assert sorted(p.name for p in (two_rank_run / "checkpoints").iterdir()) == [
        "checkpoint-001.keras",
        "checkpoint-002.keras",
    ]


def test_the_exact_test_equals_scoring_the_saved_model_in_one_process(two_rank_run, importable_project, tiny_data):
    """The saved .keras file, loaded by Keras itself in this process as a user's script would (its module imported
    for its registered layer), scores the test images as the two ranks' reduced test said."""
    import keras
    import numpy as np

    from helpers.cifar_fixtures import tiny_dataset

    importlib.import_module("mymodels3")
    m = read_metrics(two_rank_run)
    model = keras.saving.load_model(two_rank_run / "saved_models" / "keras_cifar10_trained_model.keras", compile=False)
    data = tiny_dataset(tiny_data)
    probs = model.predict(data.x_test.astype(np.float32) / 255.0, verbose=0, batch_size=256)
    assert float((probs.argmax(axis=1) == data.y_test).mean()) == pytest.approx(m["test"]["accuracy"], abs=1e-9)


def test_evaluate_and_batch_score_read_the_keras3_run(two_rank_run, project, tiny_run, tiny_data, tmp_path):
    m = read_metrics(two_rank_run)
    scored = tmp_path / "eval"
    proc = run_cli(
        *tiny_run,
        "task=evaluate",
        f"evaluate.model={two_rank_run}",
        "launcher=mpirun",
        "launcher.np=2",
        f"hydra.run.dir={scored}",
        cwd=project,
        timeout=600,
    )
    assert_ok(proc)
    evaluation = json.loads((scored / "evaluation.json").read_text())
    assert evaluation["model"].endswith("keras_cifar10_trained_model.keras")
    assert evaluation["accuracy"] == pytest.approx(m["test"]["accuracy"], abs=1e-9)
    assert evaluation["loss"] == pytest.approx(m["test"]["loss"], rel=1e-4)

    # Batch-score the first test images as files: the same classes as the evaluation predicted for them.
    from PIL import Image

    from helpers.cifar_fixtures import tiny_dataset

    images = tmp_path / "images"
    images.mkdir()
    data = tiny_dataset(tiny_data)
    for i in range(20):
        Image.fromarray(data.x_test[i]).save(images / f"{i:03d}.png")
    batch = tmp_path / "batch"
    proc = run_cli(
        *tiny_run,
        "task=evaluate",
        f"evaluate.model={two_rank_run}",
        f"evaluate.input={images}",
        f"hydra.run.dir={batch}",
        cwd=project,
        timeout=600,
    )
    assert_ok(proc)
    with open(scored / "predictions.csv") as f:
        expected = [row["predicted"] for row in csv.DictReader(f)][:20]
    with open(batch / "predictions.csv") as f:
        got = [row["predicted"] for row in csv.DictReader(f)]
    assert got == expected


@pytest.mark.slow  # ~1.5 min; Keras 3 in sync on 2 ranks, evaluate and the one-line refusals stay in the default suite
@pytest.mark.timeout(600)
def test_kill_9_mid_epoch_resumes_bit_for_bit(project, tmp_path):
    common = (*RUN, "trainer.epochs=3", "trainer.deterministic=true", "trainer.save_model=false")
    a, b = straight_and_killed_runs(*common, cwd=project, tmp_path=tmp_path, first_checkpoint="checkpoint-001.keras")
    assert b["resumed_from_epoch"] in (1, 2) and b["complete"]
    # The same batches and dropout masks after the resume: every epoch's loss and the final weights to the bit.
    assert [e["loss"] for e in b["epochs"]] == [e["loss"] for e in a["epochs"]]
    assert b["rank_weight_digests"] == a["rank_weight_digests"]
    assert b["test"] == a["test"]


@pytest.mark.parametrize(
    "model, words",
    [
        pytest.param(
            "mixed",
            ["model._target_=mymodels3.mixed mixes Keras", "both Keras 3 (keras) and Keras 2 (tf.keras)", "one Keras"],
            id="mixed",
        ),
        pytest.param("unsaveable", ["cannot be saved and loaded back", "register_keras_serializable"], id="unsaveable"),
    ],
)
def test_what_cannot_train_is_one_line_from_the_check_before_the_data(importable_project, model, words):
    """The check a run makes of its model before it reads any data (``probe_model_flavor``: the test below sees the
    CLI make it before the data, and the error line a ConfigError becomes), in this process: one line each."""
    from cifar_dist.models.keras_checks import ModelKerasError
    from cifar_dist.training.model_setup import probe_model_flavor

    cfg = compose_cfg()
    cfg.model = {"_target_": f"mymodels3.{model}"}  # as myconf/model/<model>.yaml gives it
    with pytest.raises(ModelKerasError) as refused:
        probe_model_flavor(cfg)
    line = str(refused.value)
    assert "\n" not in line
    for word in words:
        assert word in line, line


def test_a_keras3_model_on_another_backend_is_one_line_before_any_data_is_read(project, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        *RUN,
        "model=k3",
        "data=cifar10",  # a data option that reads data.path (data=sample refuses one)
        "data.path=/nonexistent/not-read.tar.gz",
        f"hydra.run.dir={run_dir}",
        cwd=project,
        env=cli_env(KERAS_BACKEND="jax"),
        timeout=300,
    )
    line = one_error_line(proc)
    for word in ("jax backend", "engine=horovod", "unset KERAS_BACKEND"):
        assert word in line, line
    assert "not-read" not in proc.stderr  # refused before the data was looked at
    assert not list(run_dir.glob("checkpoints/*"))


@pytest.mark.slow  # ~1 min; the Slurm launcher's own 2-rank tests (Keras 2) stay in the default suite
@pytest.mark.skipif(os.geteuid() != 0, reason="the test cluster runs slurmd as root (SlurmUser=root): run as root")
def test_a_keras3_model_trains_as_a_two_task_slurm_job(slurm, project, tmp_path):
    run_dir = tmp_path / "run"
    run_as_two_task_slurm_job(
        slurm, *RUN, "trainer.epochs=2", "trainer.epoch_policy=shard", f"hydra.run.dir={run_dir}", cwd=project
    )
    m = read_metrics(run_dir)
    assert m["complete"] and m["ranks"] == 2 and m["ranks_in_sync"] is True
    assert m["run"]["keras"].startswith("3.")
    assert (run_dir / "checkpoints" / "checkpoint-002.keras").is_file()


def test_a_keras3_run_is_tracked_in_mlflow(two_rank_run):
    pytest.importorskip("mlflow")
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{two_rank_run.parent / STORE}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    history = sorted(client.get_metric_history(runs[0].info.run_id, "lr"), key=lambda m: m.step)
    assert [m.step for m in history] == [1, 2]
    assert [m.value for m in history] == pytest.approx([e["lr"] for e in read_metrics(two_rank_run)["epochs"]])
