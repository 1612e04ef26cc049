"""engine=tensorflow on several processes (issue 48): TensorFlow's kernels in every process, the gradients averaged
over MPI (mpi4py), no Horovod. Real mpirun processes, a real MPI, real Slurm.

Every run here names no engine, in an environment without Horovod (the current stack; on the horovod stack
``without_horovod`` hides it), as a user of today's stack runs: ``engine=auto`` chooses tensorflow for 2 processes
on a CPU. Checked:

- the same global batch trains alike on 1 process and on 2 (full-batch steps, so that both see every image each
  step: the losses agree within float noise, with lr x world size), and the 2 end with identical weights;
- Keras 3 with BatchNorm and Dropout stays in sync, writes its checkpoints from rank 0, resumes (rank 0 reads the
  checkpoint, every process gets its weights), and the exact test counts every test image once;
- the speedrun recipe (Keras 2, BatchNorm's moving statistics averaged, SGDW, lookahead) stays in sync;
- kill -9 of one process stops the job with one line naming it; a 2-task Slurm job trains the same way;
- the collectives themselves (``mpi_peers``) under mpirun without TensorFlow, and the one-line refusals.

The horovod stack's pass runs the same-global-batch test and the collectives' only (``ONCE_ON_THE_CURRENT_STACK``):
there, Horovod trains several processes when no engine is named; the current stack's pass runs them all.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from helpers import dying_model
from helpers.cli import assert_ok, cli_env, read_metrics, run_cli, tiny_cifar
from helpers.keras3_project import MODEL as KERAS3_MODEL
from helpers.no_horovod import ONCE_ON_THE_CURRENT_STACK, env_without_horovod
from helpers.paths import REPO

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.both_stacks,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed"),
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed (the mpi extra)"),
]

# No Dropout, no BatchNorm: a step's gradient is the global batch's alone, whichever processes compute it.
PLAIN_KERAS2_MODEL = textwrap.dedent("""
    import tensorflow as tf


    def build(num_classes):
        inputs = tf.keras.Input(shape=(32, 32, 3))
        x = tf.keras.layers.Conv2D(4, 3, strides=2, activation="relu")(inputs)
        x = tf.keras.layers.Flatten()(x)
        return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes, activation="softmax")(x))
""")

DYING_MODEL = dying_model.KERAS2

QUIET = ("trainer.verbose=0", "trainer.plot=false", "trainer.tensorboard=false")
TWO = ("launcher=mpirun", "launcher.np=2", "trainer.epoch_policy=shard")
TWO_ON_CPUS = "engine=auto: Horovod is not installed; 2 processes on CPUs train on TensorFlow"


@pytest.fixture(scope="module")
def without_horovod(tmp_path_factory) -> dict:
    """The environment of a command for which Horovod is not installed (a no-op where it is not)."""
    return env_without_horovod(tmp_path_factory.mktemp("no-horovod"))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tfproject")
    for name, source in (("plain2", PLAIN_KERAS2_MODEL), ("mymodels3", KERAS3_MODEL), ("dying2", DYING_MODEL)):
        (folder / f"{name}.py").write_text(source)
    (folder / "myconf" / "model").mkdir(parents=True)
    for option, target in (("plain2", "plain2.build"), ("k3", "mymodels3.build"), ("dying2", "dying2.build")):
        (folder / "myconf" / "model" / f"{option}.yaml").write_text(f"_target_: {target}\n")
    return folder


def test_two_processes_train_as_one_process_does_on_the_same_global_batch(project, tiny_data, without_horovod):
    """256 training images: one process takes them all in one batch a step, each of two processes its half (its
    shard) in one batch of 128, the step's gradient averaged: the same global batch each step, at the same lr
    (0.1 there; 0.05 x 2 processes here, lr_scaling=linear)."""
    common = ("--config-dir", "myconf", *tiny_cifar(tiny_data), "model=plain2", "data.augment.enabled=false")
    common += (*QUIET, "optimizer=sgd", "trainer.epochs=4", "trainer.epoch_policy=shard")
    one, two = project / "one", project / "two"
    runs = (
        (one, ("trainer.batch_size=256", "optimizer.lr=0.1")),
        (two, ("trainer.batch_size=128", "optimizer.lr=0.05", *TWO)),
    )
    for run_dir, overrides in runs:
        assert_ok(run_cli(*common, *overrides, f"hydra.run.dir={run_dir}", cwd=project, env=without_horovod))
    a, b = read_metrics(one), read_metrics(two)
    assert b["run"]["engine"] == "tensorflow" and b["ranks"] == 2 and TWO_ON_CPUS in b["run"]["engine_reason"]
    assert a["run"]["engine"] == "tensorflow" and a["ranks"] == 1
    assert a["run"]["steps_per_epoch"] == b["run"]["steps_per_epoch"] == 1
    assert b["run"]["lr_scaled"] == pytest.approx(a["run"]["lr_scaled"]) == pytest.approx(0.1)
    assert b["ranks_in_sync"] is True  # the two processes' weights are equal, bit for bit
    losses = [[e["loss"] for e in m["epochs"]] for m in (a, b)]
    assert losses[0][0] - losses[0][-1] > 0.02, losses  # it learns (2.336 -> 2.294 here): the steps matter
    assert losses[1] == pytest.approx(losses[0], rel=2e-5), losses  # float noise: sums in another order
    assert b["test"]["samples"] == a["test"]["samples"] == 64
    saved = yaml.safe_load((two / ".hydra" / "config.yaml").read_text())["engine"]
    assert saved == {"name": "tensorflow", "keras": 2, "why": b["run"]["engine_reason"]}  # what a resume keeps


@pytest.fixture(scope="module")
def keras3_run(project, tiny_data, without_horovod, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("k3") / "run"
    overrides = ("--config-dir", "myconf", *tiny_cifar(tiny_data), "model=k3", *QUIET, *TWO, "trainer.batch_size=32")
    assert_ok(run_cli(*overrides, "trainer.epochs=1", f"hydra.run.dir={run_dir}", cwd=project, env=without_horovod))
    first = read_metrics(run_dir)
    assert_ok(run_cli(*overrides, "trainer.epochs=2", f"hydra.run.dir={run_dir}", cwd=project, env=without_horovod))
    return first, read_metrics(run_dir), run_dir


@ONCE_ON_THE_CURRENT_STACK
def test_a_keras3_model_with_batchnorm_stays_in_sync_and_resumes(keras3_run):
    first, resumed, run_dir = keras3_run
    for m in (first, resumed):
        assert m["run"]["engine"] == "tensorflow" and m["run"]["keras"].startswith("3.") and m["ranks"] == 2
        assert m["ranks_in_sync"] is True  # gradients averaged, BatchNorm's moving statistics averaged
        assert m["test"]["samples"] == 64 and m["test"]["correct"] == round(m["test"]["accuracy"] * 64)
    assert resumed["resumed_from_epoch"] == 1 and len(resumed["epochs"]) == 2 and resumed["complete"]
    assert "checkpoints were trained on engine=tensorflow" in resumed["run"]["engine_reason"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "checkpoint-001.keras",
        "checkpoint-002.keras",
    ]


@ONCE_ON_THE_CURRENT_STACK
def test_the_speedrun_recipe_stays_in_sync_on_two_processes(project, tiny_data, without_horovod, tmp_path):
    """airbench in Keras 2: BatchNorm (its moving statistics averaged, as on Horovod), SGDW, lookahead, TTA."""
    run_dir = tmp_path / "run"
    overrides = ("experiment=speedrun", *tiny_cifar(tiny_data), *QUIET, *TWO, "trainer.epochs=2")
    assert_ok(run_cli(*overrides, f"hydra.run.dir={run_dir}", cwd=project, env=without_horovod))
    m = read_metrics(run_dir)
    assert m["run"]["engine"] == "tensorflow" and m["ranks"] == 2 and m["ranks_in_sync"] is True
    assert m["complete"] and m["test"]["samples"] == 64


@ONCE_ON_THE_CURRENT_STACK
@pytest.mark.timeout(600)
def test_kill_9_of_one_process_stops_the_job_in_one_line(project, tiny_data, without_horovod):
    """Rank 1 dies 1 s into epoch 2; rank 0 waits in the step's allreduce, where Open MPI's runner ends it; the
    launcher's one line names the process that died, without a traceback."""
    overrides = ("--config-dir", "myconf", *tiny_cifar(tiny_data), "model=dying2", *QUIET, *TWO)
    proc = run_cli(
        *overrides, "trainer.batch_size=8", "trainer.epochs=30", "hydra.run.dir=run", cwd=project, env=without_horovod
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out and "Error executing job" not in out, out[-4000:]
    said = [line for line in out.splitlines() if "job failed" in line]
    assert len(said) == 1 and "rank 1 on " in said[0] and "was killed by signal 9 (SIGKILL)" in said[0], out[-3000:]


@ONCE_ON_THE_CURRENT_STACK
@pytest.mark.timeout(900)
@pytest.mark.skipif(os.geteuid() != 0, reason="the test cluster runs slurmd as root (SlurmUser=root): run as root")
def test_two_slurm_tasks_train_on_tensorflow_in_sync(slurm, project, tiny_data, without_horovod, tmp_path):
    """``launcher=slurm``: srun --mpi=pmix starts the 2 tasks, which join MPI through Slurm's PMIx."""
    from helpers.slurm_cluster import missing_packages

    if missing_packages():
        pytest.skip(f"Slurm not installed ({', '.join(missing_packages())})")
    run_dir = tmp_path / "run"
    overrides = ("--config-dir", "myconf", *tiny_cifar(tiny_data), "model=plain2", *QUIET, "trainer.epochs=1")
    slurm_job = ("launcher=slurm", "launcher.ntasks_per_node=2", "launcher.poll_interval_s=1")
    try:
        proc = run_cli(
            *overrides,
            *slurm_job,
            "trainer.epoch_policy=shard",
            f"hydra.run.dir={run_dir}",
            cwd=project,
            env={**without_horovod, "SLURM_CONF": slurm.env["SLURM_CONF"]},
            timeout=900,
        )
    finally:
        slurm.cancel_all()
    assert_ok(proc)
    m = read_metrics(run_dir)
    assert m["complete"] and m["ranks"] == 2 and m["ranks_in_sync"] is True and m["run"]["engine"] == "tensorflow"
    assert TWO_ON_CPUS in m["run"]["engine_reason"]


PEERS_SCRIPT = textwrap.dedent("""
    import json
    import sys
    from pathlib import Path

    import numpy as np
    from cifar_dist.training.engines.mpi_peers import join_peers

    peers = join_peers()
    r = peers.rank
    half = np.array([0.5 + r, 1.25, -2.0], np.float16)
    (Path(sys.argv[1]) / f"rank{r}.json").write_text(json.dumps({
        "where": [r, peers.size, peers.local_rank, peers.local_size, peers.host_ranks],
        "broadcast": peers.broadcast_object({"from": r}),
        "gathered": peers.allgather_object(r * 10),
        "any": [peers.any(r == 1), peers.any(False)],
        "means": [a.tolist() for a in peers.mean_arrays([np.full((2, 2), r + 1.0, np.float32), np.arange(3.0) * r])],
        "dtypes": [str(a.dtype) for a in peers.mean_arrays([np.zeros(2, np.float32), np.zeros(1)])],
        "fp16_sum": peers.sum_in_place(half).tolist(),
        "bcast_arrays": [a.tolist() for a in peers.broadcast_arrays([np.full(2, r, np.int64), np.full(1, r + 0.5)])],
    }))  # a file each: two processes' prints may interleave
""")


def test_the_collectives_over_mpi_give_every_process_the_same_values(tmp_path):
    """``mpi_peers`` under a real mpirun, without TensorFlow: each collective, fused buffers split back by dtype."""
    (tmp_path / "peers.py").write_text(PEERS_SCRIPT)
    argv = ["mpirun", "-np", "2", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    proc = subprocess.run(
        [*argv, sys.executable, str(tmp_path / "peers.py"), str(tmp_path)],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["where"] for r in results] == [[0, 2, 0, 2, 2], [1, 2, 1, 2, 2]]
    for r in results:
        assert r["broadcast"] == {"from": 0} and r["gathered"] == [0, 10] and r["any"] == [True, False]
        assert r["means"] == [[[1.5, 1.5], [1.5, 1.5]], [0.0, 0.5, 1.0]]
        assert r["dtypes"] == ["float32", "float64"]
        assert r["fp16_sum"] == [2.0, 2.5, -4.0]  # float16, added by MPI through cifar_dist's own operation
        assert r["bcast_arrays"] == [[0, 0], [0.5]]


@ONCE_ON_THE_CURRENT_STACK
def test_a_concurrent_sweep_trains_each_point_in_its_own_mpi_group(project, tiny_data, without_horovod, tmp_path):
    """``launcher.concurrent=2``: one mpirun of 4 processes, 2 points of 2 processes each; each point's gradients
    averaged over its own group's communicator (a Horovod world each on the horovod stack)."""
    sweep = tmp_path / "sweep"
    proc = run_cli(
        *("-m", "--config-dir", "myconf", *tiny_cifar(tiny_data), "model=plain2", *QUIET, "trainer.epochs=1"),
        *("optimizer.lr=1e-3,2e-3", "launcher=mpirun", "launcher.np=2", "launcher.concurrent=2"),
        "launcher.oversubscribe=true",  # 4 processes on 2 cores
        *("trainer.epoch_policy=shard", f"hydra.sweep.dir={sweep}"),
        cwd=project,
        env=without_horovod,
        timeout=600,
    )
    assert_ok(proc)
    assert "points #0, #1 in one mpirun, 2 group(s) of 2 rank(s)" in proc.stdout + proc.stderr
    for num, lr in ((0, 1e-3), (1, 2e-3)):
        m = read_metrics(sweep / str(num))
        assert m["complete"] and m["run"]["engine"] == "tensorflow" and m["ranks"] == 2 and m["ranks_in_sync"]
        assert m["run"]["lr_config"] == lr
