"""The run-dir lock: one writer per run dir.

* A second run into a busy run dir is refused at once, in one line naming
  the holder (pid, host); a lock left by a killed run does not block.
* Each test also checks what the resume policy does once the lock is taken:
  a finished run whose checkpoints are gone is not trained again over its
  saved model; a damaged metrics.json does not block a resume, nor does a run dir of an earlier version.

A re-run with other settings: tests/rundir/test_resume_policy.py. Temp files: tests/common/test_durable.py.
"""

import json
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from cifar_dist.common.atomic_files import TEMP_SUFFIX
from cifar_dist.rundir.lock import LOCK_NAME, RunDirInUse, RunDirLock
from helpers.cli import assert_ok, cli_env, error_lines, run_cli, start_cli
from helpers.paths import REPO


def test_a_busy_run_dir_is_refused_naming_its_holder_and_a_resume_survives_a_damaged_record(
    half_run, half_run_overrides, tmp_path
):
    """The run dir is also one of an earlier version, before the marker and 1-based CSV epochs (no
    .cifar_dist_run, training_log.csv numbered from 0): it resumes, its log renumbered, and is claimed."""
    import csv

    from cifar_dist.rundir.owner import MARKER

    run_dir = tmp_path / "run"
    shutil.copytree(half_run, run_dir)
    (run_dir / MARKER).unlink()
    (run_dir / LOCK_NAME).unlink(missing_ok=True)
    log = run_dir / "training_log.csv"
    rows = list(csv.reader(open(log, newline="")))
    assert [r[0] for r in rows[1:]] == ["1"]  # this version writes epoch 1 as 1
    rows[1][0] = "0"  # as Keras' CSVLogger numbered it before
    with open(log, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    (run_dir / "metrics.json").write_text('{"epochs": [{"epoch": 1, "loss": 2.')  # cut off mid-write by hand
    users_file = run_dir / ".notes.partial"
    users_file.write_text("mine")
    ours = run_dir / f".training_log.csv.abcd_123{TEMP_SUFFIX}"  # a temp file a killed run left
    ours.write_text("half")

    again = (*half_run_overrides, f"hydra.run.dir={run_dir}")
    first = start_cli(*again, stderr=subprocess.PIPE)
    try:
        lock = run_dir / LOCK_NAME
        deadline = time.time() + 120
        overrides = run_dir / ".hydra" / "overrides.yaml"  # rewritten by the first run once it holds the lock
        while not (
            lock.exists()
            and f"pid {first.pid} " in lock.read_text()
            and "max_epochs_per_run" not in overrides.read_text()
        ):
            assert first.poll() is None and time.time() < deadline, "the run never took the lock"
            time.sleep(0.1)
        hydra_config = (run_dir / ".hydra" / "config.yaml").read_bytes()
        second = run_cli(*again, timeout=120)
        assert second.returncode == 2, second.stderr[-3000:]
        (line,) = error_lines(second)
        assert f"pid {first.pid} on host {socket.gethostname()}" in line and "hydra.run.dir" in line
        assert (run_dir / ".hydra" / "config.yaml").read_bytes() == hydra_config
        out, err = first.communicate(timeout=600)
    finally:
        first.kill()
    assert_ok(first, out + err)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["complete"] and [e["epoch"] for e in metrics["epochs"]] == [2]
    assert (run_dir / "metrics.json.damaged").read_text().startswith('{"epochs": [{"epoch": 1')
    assert users_file.read_text() == "mine" and not ours.exists()
    assert "resuming after epoch 1" in out + err
    assert [r["epoch"] for r in csv.DictReader(open(log, newline=""))] == ["1", "2"]
    assert (run_dir / MARKER).is_file()  # claimed for this version once the checks passed


def test_a_lock_left_by_a_killed_run_does_not_block_and_a_finished_run_is_not_retrained(trained_run, tmp_path):
    finished = tmp_path / "run"
    shutil.copytree(trained_run[0], finished)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from cifar_dist.rundir.lock import RunDirLock; "
            "RunDirLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)",
            str(finished),
        ],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunDirInUse, match=f"pid {holder.pid} "):
        RunDirLock(finished).acquire()
    holder.send_signal(signal.SIGKILL)
    holder.wait()

    shutil.rmtree(finished / "checkpoints")
    model = finished / "saved_models" / "keras_cifar10_trained_model.h5"
    before = model.read_bytes()
    proc = run_cli("data=sample", "trainer.epochs=3", "trainer.seed=7", f"hydra.run.dir={finished}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert "holds a finished run" in line and "no checkpoints" in line  # refused for that, not for the dead lock
    assert model.read_bytes() == before
