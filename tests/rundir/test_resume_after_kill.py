"""kill -9 of a real 1-rank run at the worst moments, then re-runs in the same run dir.

One run dir goes through a chain of runs, each killed with SIGKILL at a
different point (mid-epoch; halfway through writing a checkpoint's HDF5; with
the checkpoint's temp file complete but not yet renamed; while metrics.json is
being replaced; halfway through writing the saved model), then a last run
that finishes. After every kill: every file under a checkpoint or saved-model
name loads, metrics.json parses, and the next run resumes from the newest
complete epoch. At the end: the configured number of epochs, one record per
epoch, a model that loads, no temp files left.

The killed process is ``python -m cifar_dist`` itself with a hook installed
before it starts (CRASH_DRIVER below): at the chosen point the hook writes a
marker file and sleeps, and the test then kills it, so the kill lands exactly
there rather than wherever a timer happens to fall. One rank of a 2-rank
mpirun job is killed in tests/launchers/test_launcher_mpirun.py
(test_a_killed_rank_stops_the_job_and_a_rerun_resumes).
"""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cifar_dist.common.atomic_files import is_temp_name
from helpers.cli import assert_ok, cli_env, read_metrics, run_cli
from helpers.paths import REPO

# 15 steps per epoch in calls of 4 (Keras calls batch hooks once per call: after steps 4, 8, 12, 15),
# so "mid-epoch" exists and the multi-step path of the default (16) is the one killed.
COMMON = (
    "data=sample",
    "trainer.batch_size=256",
    "trainer.epochs=2",
    "trainer.plot=false",
    "trainer.tensorboard=false",
    "trainer.verbose=2",
    "trainer.steps_per_execution=4",
)

# Runs the app like `python -m cifar_dist`, with one hook that stops at CRASH_AT.
CRASH_DRIVER = r"""
import os, sys, time
from pathlib import Path

AT, MARKER = os.environ["CRASH_AT"], Path(os.environ["CRASH_MARKER"])

def reached(what):
    MARKER.write_text(what)
    time.sleep(300)  # the test kills this process now

import cifar_dist  # TF_USE_LEGACY_KERAS before TensorFlow
if AT == "mid-epoch-2":
    from cifar_dist.training import callbacks
    class Hooked(callbacks.EpochTimer):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            super().on_epoch_begin(epoch, logs)
        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == 1 and batch == 3:  # the end of epoch 2's first call (steps 1-4)
                reached("batch 4 of epoch 2")
    callbacks.EpochTimer = Hooked
elif AT in ("checkpoint-hdf5", "model-hdf5"):
    import tensorflow as tf
    from tf_keras.src.saving.legacy import hdf5_format
    # checkpoint: model weights written, optimizer state not yet; model: nothing but the config yet
    name = "save_optimizer_weights_to_hdf5_group" if AT == "checkpoint-hdf5" else "save_weights_to_hdf5_group"
    real = getattr(hdf5_format, name)
    def hooked(group, *args, **kwargs):
        target = group.file.filename
        at_checkpoint = AT == "checkpoint-hdf5" and ".checkpoint-002." in target
        if at_checkpoint or (AT == "model-hdf5" and "trained_model" in target):
            reached(target)
        return real(group, *args, **kwargs)
    setattr(hdf5_format, name, hooked)
elif AT in ("checkpoint-rename", "metrics-rename"):
    real_fsync = os.fsync
    needle = ".checkpoint-002." if AT == "checkpoint-rename" else ".metrics.json."
    def fsync(fd):
        real_fsync(fd)
        target = os.readlink(f"/proc/self/fd/{fd}")
        partial = needle in target and target.endswith(".partial")
        if partial and (AT != "metrics-rename" or '"epoch": 2' in Path(target).read_text()):
            reached(target)
    os.fsync = fsync
sys.argv = ["cifar_dist", *sys.argv[1:]]
from cifar_dist.app import main
main()
"""


def crash_at(point: str, run_dir: Path, tmp_path: Path, timeout: float = 300) -> str:
    """Start a run that stops at ``point``, kill -9 it there; return what the hook saw."""
    marker = tmp_path / f"reached-{point}"
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH_DRIVER, *COMMON, f"hydra.run.dir={run_dir}"],
        cwd=REPO,
        # The driver imports TensorFlow before cifar_dist (to hook it), so it chooses the kernels
        # trainer.onednn would have chosen, as cifar_dist's one-line error tells such callers to.
        env=cli_env(CRASH_AT=point, CRASH_MARKER=str(marker), TF_ENABLE_ONEDNN_OPTS="1"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + timeout
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"run ended before {point}: {proc.stdout.read()[-3000:]}")
            if time.time() > deadline:
                pytest.fail(f"timed out waiting for {point}")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    return marker.read_text()


def assert_nothing_half_written(run_dir: Path) -> list:
    """Every file under a checkpoint or model name loads; metrics.json parses. Returns checkpoint epochs."""
    import tensorflow as tf

    from cifar_dist.rundir import checkpoints

    found = checkpoints.list_checkpoints(run_dir / "checkpoints")
    for _, path in found:
        tf.keras.models.load_model(path)  # raises on a truncated or half-written file
        assert checkpoints.read_optimizer_weights(path), f"{path.name} has no optimizer state"
    model = run_dir / "saved_models" / "keras_cifar10_trained_model.h5"
    if model.exists():
        tf.keras.models.load_model(model)
    if (run_dir / "metrics.json").exists():
        json.loads((run_dir / "metrics.json").read_text())
    return [epoch for epoch, _ in found]


def temp_files(run_dir: Path) -> list:
    return sorted(
        str(p.relative_to(run_dir))
        for d in (run_dir, run_dir / "checkpoints", run_dir / "saved_models")
        if d.is_dir()
        for p in d.iterdir()
        if p.is_file() and is_temp_name(p.name)  # the atomic writer's own temp files, not the run dir's marker files
    )


# 2.5 min; kills and reruns in default-suite tests: test_heartbeat, test_rank_exec, test_train_e2e's resume
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_kill_9_anywhere_loses_nothing_and_reruns_finish(tmp_path):
    import cifar_dist  # noqa: F401  (Keras 2 for the load checks)

    run_dir = tmp_path / "run"
    rerun_points = [
        # (where the run is killed, checkpoints on disk after the kill)
        ("mid-epoch-2", [1]),
        ("checkpoint-hdf5", [1]),  # checkpoint-002 half-written under its temp name
        ("checkpoint-rename", [1]),  # complete, fsynced, not yet renamed
        ("metrics-rename", [1]),  # epoch 2 recorded in the temp file, not yet in metrics.json
        ("model-hdf5", [1, 2]),  # all epochs done, the saved model half-written
    ]
    for point, expected in rerun_points:
        seen = crash_at(point, run_dir, tmp_path)
        assert assert_nothing_half_written(run_dir) == expected, (point, seen)
        m = read_metrics(run_dir)
        assert m["complete"] is False
        if point == "mid-epoch-2":
            assert [e["epoch"] for e in m["epochs"]] == [1]
        if point in ("checkpoint-hdf5", "checkpoint-rename", "model-hdf5"):
            assert ".partial" in seen and temp_files(run_dir), "the hook did not stop inside an atomic write"

    done = run_cli(*COMMON, f"hydra.run.dir={run_dir}", timeout=600)
    assert_ok(done)
    assert "resuming after epoch 2" in done.stdout + done.stderr
    assert assert_nothing_half_written(run_dir) == [1, 2]
    m = read_metrics(run_dir)
    assert m["complete"] is True and m["resumed_from_epoch"] == 2
    assert [e["epoch"] for e in m["epochs"]] == [1, 2]  # every epoch recorded once, none lost
    assert m["test"]["samples"] > 0 and (run_dir / "saved_models" / "keras_cifar10_trained_model.h5").exists()
    with open(run_dir / "training_log.csv") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["1", "2"]  # 1-based, as Keras prints
    assert temp_files(run_dir) == [], "temp files of killed writes left behind"
