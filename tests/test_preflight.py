"""A run dir that cannot be written, and a disk that fills up while saving.

Unknown keys, wrong types and zero/negative epochs, batch sizes or ranks are
covered in test_config.py (test_typos_and_wrong_types_fail_at_composition,
test_bad_values_listed_in_one_line), test_train_e2e.py
(test_bad_values_fail_before_training) and test_launcher_command.py
(test_preflight_errors_are_one_line_and_say_what_to_do).

The read-only and disk-full cases mount a small tmpfs in a private mount
namespace (``unshare -rm``: no real root needed where user namespaces are
allowed; the mount vanishes with the process).
"""
import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, cli_env, run_cli

QUICK = ("data=sample", "trainer.batch_size=256", "trainer.epochs=2", "trainer.plot=false",
         "trainer.tensorboard=false", "trainer.verbose=2")


def one_error_line(proc) -> str:
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("cifar_dist: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not can_mount_tmpfs(), reason="cannot mount a tmpfs in a user+mount namespace here")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_run_dir_under_a_file_is_one_line_before_anything_starts(tmp_path, sweep):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    proc = run_cli(*(["-m"] if sweep else []), *QUICK, f"{key}={blocker / 'run'}", timeout=240)
    line = one_error_line(proc)
    assert str(blocker) in line and "is not a directory" in line and key in line
    assert "Epoch" not in proc.stdout


@pytest.mark.timeout(300)
def test_unwritable_checkpoints_folder_fails_before_training(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").write_text("a file where the checkpoints folder goes")
    proc = run_cli(*QUICK, f"hydra.run.dir={run_dir}", timeout=240)
    line = one_error_line(proc)
    assert str(run_dir / "checkpoints") in line and "hydra.run.dir" in line
    assert "Epoch" not in proc.stdout + proc.stderr  # not after an epoch of training


@needs_tmpfs
@pytest.mark.timeout(300)
def test_read_only_run_dir_is_one_line(tmp_path):
    mnt = tmp_path / "ro"
    mnt.mkdir()
    argv = [sys.executable, "-m", "cifar_dist", *QUICK, f"hydra.run.dir={mnt / 'run'}"]
    script = f"mount -t tmpfs -o ro,size=1m tmpfs {mnt} && exec \"$@\""
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *argv], cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    line = one_error_line(proc)
    assert "Read-only file system" in line and str(mnt) in line


# Inside the namespace: a 16 MiB tmpfs holds the first checkpoint (~10 MB) but
# not the second; after the failed run the tmpfs is grown and the run resumed.
DISK_FULL = textwrap.dedent(r'''
    set -u
    mount -t tmpfs -o size=16m tmpfs "$MNT" || exit 99
    "$PY" -m cifar_dist $QUICK hydra.run.dir="$MNT/run" > "$OUT/first.out" 2> "$OUT/first.err"
    echo $? > "$OUT/first.rc"
    "$PY" - "$MNT/run" > "$OUT/after.json" <<'CHECK'
    import json, sys
    from pathlib import Path
    import cifar_dist, tensorflow as tf
    run = Path(sys.argv[1])
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    for name in ckpts:
        tf.keras.models.load_model(run / "checkpoints" / name)  # raises if half-written
    metrics = json.loads((run / "metrics.json").read_text())
    print(json.dumps({"files": ckpts, "epochs": [e["epoch"] for e in metrics["epochs"]]}))
    CHECK
    mount -o remount,size=64m "$MNT"
    "$PY" -m cifar_dist $QUICK hydra.run.dir="$MNT/run" > "$OUT/second.out" 2> "$OUT/second.err"
    echo $? > "$OUT/second.rc"
    cp "$MNT/run/metrics.json" "$OUT/metrics.json"
    ls -a "$MNT/run/checkpoints" "$MNT/run/saved_models" > "$OUT/final.ls"
''')


@pytest.mark.slow  # 1.2 min; the run-dir guards' other tests stay in the default suite
@needs_tmpfs
@pytest.mark.timeout(900)
def test_disk_full_while_saving_keeps_earlier_checkpoints_and_the_rerun_resumes(tmp_path):
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    env = cli_env(MNT=str(mnt), OUT=str(out), PY=sys.executable, QUICK=" ".join(QUICK))
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", DISK_FULL], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=850, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    class First:
        returncode = int((out / "first.rc").read_text())
        stdout = (out / "first.out").read_text()
        stderr = (out / "first.err").read_text()

    line = one_error_line(First)
    assert "no space left on the device" in line and "checkpoint-002.h5" in line and "hydra.run.dir" in line
    after = json.loads((out / "after.json").read_text())
    assert after["files"] == ["checkpoint-001.h5"]  # intact, loads; the failed write left no temp file
    assert after["epochs"][0] == 1

    assert (out / "second.rc").read_text().strip() == "0", (out / "second.err").read_text()[-3000:]
    assert "resuming after epoch 1" in (out / "second.err").read_text() + (out / "second.out").read_text()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["complete"] and metrics["resumed_from_epoch"] == 1
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]
    assert "keras_cifar10_trained_model.h5" in (out / "final.ls").read_text()
