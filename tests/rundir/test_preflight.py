"""Preflight of the run dir: one that cannot be written is one line before anything starts.

Unknown keys, wrong types and zero/negative epochs, batch sizes or ranks are
covered in tests/config/test_config.py (test_typos_and_wrong_types_fail_at_composition,
test_bad_values_listed_in_one_line), tests/e2e/test_train_e2e.py
(test_bad_values_fail_before_training) and tests/launchers/test_launcher_command.py
(test_preflight_errors_are_one_line_and_say_what_to_do).

A disk that fills up while saving: tests/common/test_durable.py. The read-only case
mounts a small tmpfs in a private mount namespace (``unshare -rm``: no real
root needed where user namespaces are allowed; the mount vanishes with the
process).
"""

import subprocess
import sys

import pytest

from helpers.cli import QUICK_2_EPOCHS as QUICK
from helpers.cli import cli_env, one_error_line, run_cli
from helpers.paths import REPO, needs_tmpfs


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
    script = f'mount -t tmpfs -o ro,size=1m tmpfs {mnt} && exec "$@"'
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", *argv],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    line = one_error_line(proc)
    assert "Read-only file system" in line and str(mnt) in line
