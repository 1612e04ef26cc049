"""engine=jax: Keras 3 models on JAX with Keras' own data parallelism, no Horovod: real processes, real JAX.

The Keras 3 user model of test_keras3.py (a registered custom layer, Dropout,
BatchNormalization) trains on 2 mpirun processes that feed different data
and ends with identical weights: one XLA program over the global batch per
step, its variables one array for the job; the exact test equals scoring
the saved model; evaluate (on the engine the run trained with) gives the
test numbers training reported; a kill -9 resumes from the last complete
epoch with the same batches (every process loads the checkpoint rank 0
read); the same run is a 2-task job on the tests' real Slurm; and what does
not apply to JAX is refused in one line before anything starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import (
    assert_ok,
    cli_env,
    one_error_line,
    read_metrics,
    run_as_two_task_slurm_job,
    run_cli,
    straight_and_killed_runs,
)
from fake_azureml.fixtures import aml_env, aml_overrides, fake_aml, snapshot_cache  # noqa: F401
from test_keras3 import MODEL

pytestmark = [pytest.mark.mpi, pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")]

KERAS2_MODEL = textwrap.dedent("""
    import tensorflow as tf


    def build(num_classes):
        inputs = tf.keras.Input(shape=(32, 32, 3))
        x = tf.keras.layers.Flatten()(inputs)
        return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes, activation="softmax")(x))
""")

RUN = (
    "--config-dir",
    "myconf",
    "model=k3",
    "engine=jax",
    "data=sample",
    "trainer.batch_size=64",
    "trainer.plot=false",
    "trainer.tensorboard=false",
    "trainer.verbose=0",
)
TWO = ("launcher=mpirun", "launcher.np=2")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("jaxproject")
    (folder / "mymodels3.py").write_text(MODEL)
    (folder / "mymodels2.py").write_text(KERAS2_MODEL)
    (folder / "myconf" / "model").mkdir(parents=True)
    (folder / "myconf" / "model" / "k3.yaml").write_text("_target_: mymodels3.build\n")
    (folder / "myconf" / "model" / "k2.yaml").write_text("_target_: mymodels2.build\n")
    return folder


@pytest.fixture(scope="module")
def two_process_run(project, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("jax-two") / "run"
    proc = run_cli(
        *RUN,
        *TWO,
        "trainer.epochs=2",
        "trainer.epoch_policy=shard",
        f"hydra.run.dir={run_dir}",
        cwd=project,
        timeout=600,
    )
    assert_ok(proc)
    return run_dir


def test_two_processes_on_different_data_end_with_identical_weights(two_process_run):
    m = read_metrics(two_process_run)
    assert m["ranks"] == 2 and m["complete"]
    assert m["run"]["engine"] == "jax" and "jax" in m["run"] and "horovod" not in m["run"]
    assert m["run"]["keras"].startswith("3.")
    # shard: each process feeds its own half of the images every epoch; only one program over the global
    # batch (Keras' DataParallel) can make the two end alike.
    assert m["run"]["steps_per_epoch"] == 4068 // 2 // 64
    assert len(m["rank_weight_digests"]) == 2 and m["ranks_in_sync"] is True
    assert sorted(p.name for p in (two_process_run / "checkpoints").iterdir()) == [
        "checkpoint-001.keras",
        "checkpoint-002.keras",
    ]
    # The exact test counts each image once, though every process scored all of them.
    assert m["test"]["samples"] == 1017 and m["test"]["correct"] == round(m["test"]["accuracy"] * 1017)


def test_evaluate_on_the_run_s_engine_gives_the_numbers_training_reported(two_process_run, project, tmp_path):
    m = read_metrics(two_process_run)
    scored = tmp_path / "eval"
    proc = run_cli(
        *RUN[:3],
        "data=sample",
        "trainer.verbose=0",
        "task=evaluate",
        f"evaluate.model={two_process_run}",
        *TWO,
        f"hydra.run.dir={scored}",
        cwd=project,
        timeout=600,
    )
    assert_ok(proc)
    evaluation = json.loads((scored / "evaluation.json").read_text())
    assert evaluation["model"].endswith("keras_cifar10_trained_model.keras") and evaluation["ranks"] == 2
    assert evaluation["accuracy"] == pytest.approx(m["test"]["accuracy"], abs=1e-9)
    assert evaluation["loss"] == pytest.approx(m["test"]["loss"], rel=1e-4)
    assert "Horovod" not in (scored / "cifar_dist.log").read_text()


@pytest.mark.timeout(900)
def test_kill_9_resumes_from_the_last_complete_epoch_with_the_same_batches(project, tmp_path):
    common = (*RUN, *TWO, "trainer.epochs=3", "trainer.deterministic=true", "trainer.save_model=false")
    a, b = straight_and_killed_runs(*common, cwd=project, tmp_path=tmp_path, first_checkpoint="checkpoint-001.keras")
    assert b["resumed_from_epoch"] in (1, 2) and b["complete"] and b["ranks_in_sync"]
    # The same batches and dropout masks after the resume: every epoch's loss and the final weights.
    assert [e["loss"] for e in b["epochs"]] == [e["loss"] for e in a["epochs"]]
    assert b["rank_weight_digests"] == a["rank_weight_digests"]
    assert b["test"] == a["test"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the test cluster runs slurmd as root (SlurmUser=root): run as root")
def test_engine_jax_trains_as_a_two_task_slurm_job(slurm, project, tmp_path):
    run_dir = tmp_path / "run"
    run_as_two_task_slurm_job(
        slurm, *RUN, "trainer.epochs=1", "trainer.epoch_policy=shard", f"hydra.run.dir={run_dir}", cwd=project
    )
    m = read_metrics(run_dir)
    assert m["complete"] and m["ranks"] == 2 and m["ranks_in_sync"] is True and m["run"]["engine"] == "jax"
    assert (run_dir / "checkpoints" / "checkpoint-001.keras").is_file()


def test_engine_jax_runs_as_an_azure_ml_job(fake_aml, snapshot_cache, project, tmp_path):
    """Against the local Azure ML double (the real azure-ai-ml SDK), which runs the job's one process for real."""
    run_dir = tmp_path / "run"
    proc = run_cli(
        *RUN,
        "trainer.epochs=1",
        *aml_overrides(fake_aml, run_dir, snapshot_cache),
        env=aml_env(fake_aml),
        cwd=project,
        timeout=600,
    )
    assert_ok(proc)
    m = read_metrics(run_dir)
    assert m["complete"] and m["run"]["engine"] == "jax" and "jax" in m["run"]
    assert (run_dir / "saved_models" / "keras_cifar10_trained_model.keras").is_file()


@pytest.mark.parametrize(
    "overrides, words",
    [
        (("launcher=gloo", "launcher.np=2"), ["launcher=gloo", "engine=jax", "launcher=mpirun"]),
        (("launcher=mpirun", "launcher.np=2", "launcher.concurrent=2"), ["launcher.concurrent=2", "engine=jax"]),
        (("trainer.compression=fp16",), ["trainer.compression=fp16", "Horovod's", "trainer.compression=none"]),
        (("engine.keras=2",), ["engine=jax trains Keras 3", "engine.keras=2", "engine=horovod"]),
    ],
)
def test_what_does_not_apply_to_jax_is_one_line_before_anything_starts(project, tmp_path, overrides, words):
    run_dir = tmp_path / "run"
    proc = run_cli(*RUN, *overrides, f"hydra.run.dir={run_dir}", cwd=project, timeout=120)
    line = one_error_line(proc)
    for word in words:
        assert word in line, line
    assert not run_dir.exists()  # refused with the config: no run dir written


def test_a_tf_keras_model_on_engine_jax_is_one_line_before_any_data_is_read(project, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        *RUN, "model=k2", "data.path=/nonexistent/not-read.tar.gz", f"hydra.run.dir={run_dir}", cwd=project, timeout=300
    )
    line = one_error_line(proc)
    for word in ("model._target_=mymodels2.build", "Keras 2 (tf.keras)", "engine=jax", "import keras"):
        assert word in line, line
    assert "not-read" not in proc.stderr


def test_the_peers_come_from_open_mpi_or_slurm_and_one_process_joins_no_one():
    from cifar_dist.training.engines.world import local_processes_from_env, local_rank_from_env, processes_from_env

    ompi = {
        "OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:5000",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    }
    srun = {
        "SLURM_STEP_NODELIST": "n[1-2]",
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_JOB_ID": "7",
    }
    assert [f(ompi) for f in (processes_from_env, local_processes_from_env, local_rank_from_env)] == [4, 2, 1]
    assert [f(srun) for f in (processes_from_env, local_processes_from_env, local_rank_from_env)] == [4, 2, 1]
    # mpirun inside a Slurm allocation: Open MPI's world, as JAX itself detects it first.
    assert processes_from_env({**srun, **ompi, "OMPI_COMM_WORLD_SIZE": "2"}) == 2
    # An sbatch script's own environment (no step) and a plain shell: one process, nothing to join.
    assert processes_from_env({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}) == 1
    assert processes_from_env({}) == 1 and local_processes_from_env({}) == 1 and local_rank_from_env({}) == 0


def test_a_process_with_keras_on_tensorflow_already_is_refused_in_one_line():
    code = (
        "import os; os.environ['KERAS_BACKEND'] = 'tensorflow'; import keras\n"
        "from cifar_dist.training.engines.jax import select_keras_backend\n"
        "try:\n    select_keras_backend()\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=120)
    assert_ok(proc)
    line = proc.stdout.strip()
    assert line.startswith("JaxEngineError") and "on tensorflow already" in line and "own process" in line, line
