"""A folder cifar_dist did not make, a refused command, a dry run, a full disk, a broken YAML file.

* A run dir holding a user's files (no ``.cifar_dist_run`` marker) is
  refused in one line naming the way out, before anything in it is touched;
  adopting it (an empty marker) moves the files a run would replace aside.
* A refused command (bad values, a refused launcher setting, a dry run)
  leaves nothing under ``outputs/``; in a run dir that already exists the
  reason is also in its log. A run that fails once started (a diverged loss) keeps its run dir and the reason in
  its log: tests/common/test_console_line.py, whose diverged run checks that too.
* A full disk and a YAML syntax error in a user's config dir are one line,
  rc 2, no traceback.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cifar_dist.rundir import owner as rundir_owner
from cifar_dist.rundir.owner import MARKER, Owner, claim, owner
from helpers.cli import assert_ok, error_lines, run_cli

QUICK = ("data=sample", "trainer.epochs=1", "trainer.verbose=0", "trainer.plot=false", "trainer.tensorboard=false")


def no_traceback(proc) -> bool:
    return "Traceback" not in proc.stdout + proc.stderr


def files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def users_folder(tmp_path) -> Path:
    """A folder of someone's own results, with names a run would write (issue 25, item 2)."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "metrics.json").write_text('{"mine": true}\n')
    (folder / "training_log.csv").write_text("epoch,loss\n1,0.5\n")
    (folder / "learning_curves.png").write_bytes(b"\x89PNG not really")
    (folder / "cifar_dist.log").write_text("my notes\n")
    (folder / ".training_log.csv.abcd_123.cifar_dist.partial").write_text("mine too, despite the name\n")
    return folder


def test_a_folder_of_a_users_files_is_refused_untouched(users_folder):
    before = files(users_folder)
    proc = run_cli(*QUICK, f"hydra.run.dir={users_folder}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "was not made by cifar_dist" in line and "hydra.run.dir" in line and f"touch {users_folder / MARKER}" in line
    assert no_traceback(proc)
    assert files(users_folder) == before
    assert sorted(p.name for p in users_folder.iterdir()) == sorted(before)  # no lock file, no .hydra/


def test_adopting_a_folder_keeps_every_file_a_run_would_replace(users_folder):
    before = files(users_folder)
    (users_folder / MARKER).touch()
    assert owner(users_folder) is Owner.ADOPTED
    kept = claim(users_folder, Owner.ADOPTED, users_folder)
    assert sorted(p.name.split(".kept-")[0] for p in kept) == sorted(before)
    for path in kept:  # moved, byte for byte, under a name no run writes or deletes
        assert path.read_bytes() == before[path.name.split(".kept-")[0]]
    assert owner(users_folder) is Owner.OURS


def test_run_dirs_of_earlier_versions_are_ours(tmp_path):
    old = tmp_path / "old"
    (old / ".hydra").mkdir(parents=True)
    (old / ".hydra" / "hydra.yaml").write_text("hydra:\n  job:\n    name: cifar_dist\n")
    (old / "metrics.json").write_text("{}")
    assert owner(old) is Owner.LEGACY
    other_app = tmp_path / "other"
    (other_app / ".hydra").mkdir(parents=True)
    (other_app / ".hydra" / "hydra.yaml").write_text("hydra:\n  job:\n    name: my_app\n")
    assert owner(other_app) is Owner.FOREIGN
    copied = tmp_path / "copied"  # checkpoints copied to resume from, or a run with hydra.output_subdir=null
    (copied / "checkpoints").mkdir(parents=True)
    (copied / "checkpoints" / "checkpoint-002.h5").write_bytes(b"")
    assert owner(copied) is Owner.LEGACY
    empty = tmp_path / "empty"
    empty.mkdir()
    assert owner(empty) is Owner.EMPTY and owner(tmp_path / "new") is Owner.NEW


def test_only_what_this_process_created_is_removed(tmp_path, monkeypatch):
    parent = tmp_path / "existed"
    parent.mkdir()
    run_dir = parent / "day" / "time"
    run_dir.mkdir(parents=True)
    claim(run_dir, Owner.NEW, parent)
    monkeypatch.setattr(rundir_owner.os, "getpid", lambda: 1)  # another process: not ours to remove
    assert not rundir_owner.remove_if_created_here(run_dir) and run_dir.is_dir()
    monkeypatch.undo()
    assert rundir_owner.remove_if_created_here(run_dir)
    assert not (parent / "day").exists() and parent.is_dir()  # up to, never including, what existed


@pytest.mark.parametrize(
    "overrides",
    [
        ("trainer.epochs=-3",),
        ("trainer.batch_size=0", "launcher=slurm", "launcher.nodes=0"),
        ("launcher=mpirun", "launcher.np=64"),  # refused by the launcher once the job has started
    ],
)
def test_a_refused_command_writes_nothing_under_outputs(tmp_path, overrides):
    proc = run_cli("data=sample", *overrides, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(error_lines(proc)) == 1 and no_traceback(proc)
    assert list(tmp_path.iterdir()) == []


def test_every_bad_value_is_named_in_one_line_the_launchers_too(tmp_path):
    proc = run_cli("trainer.batch_size=0", "launcher=slurm", "launcher.nodes=0", cwd=tmp_path, timeout=120)
    (line,) = error_lines(proc)
    assert "trainer.batch_size=0" in line and "launcher.nodes=0" in line


def test_a_dry_run_leaves_no_run_dir_and_says_so(tmp_path):
    proc = run_cli(
        "data=sample", "launcher=mpirun", "launcher.np=2", "launcher.dry_run=true", cwd=tmp_path, timeout=120
    )
    assert_ok(proc)
    out = proc.stdout.splitlines()
    assert out[0].startswith("Dry run: the mpirun command for ") and out[1].startswith("mpirun ")
    assert out[-1] == "dry run: 1 command written, nothing started"
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_in_an_existing_run_dir_is_also_in_its_log(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "hydra.yaml").write_text("hydra:\n  job:\n    name: cifar_dist\n")
    (run_dir / "cifar_dist.log").write_text("an earlier run's log\n")
    proc = run_cli("data=sample", "trainer.epochs=-3", f"hydra.run.dir={run_dir}", timeout=120)
    assert proc.returncode == 2
    log = (run_dir / "cifar_dist.log").read_text()
    assert log.startswith("an earlier run's log\n")  # kept, and the reason added
    assert "refused: bad config: trainer.epochs=-3 must be >= 1" in log


def test_a_yaml_syntax_error_in_a_users_config_dir_is_one_line(tmp_path):
    (tmp_path / "mine" / "data").mkdir(parents=True)
    (tmp_path / "mine" / "data" / "mydata.yaml").write_text("name: mydata\n  path: [broken\n")
    proc = run_cli("--config-dir", str(tmp_path / "mine"), "data=mydata", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and no_traceback(proc), proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "mydata.yaml, line 2, column" in line and "YAML" in line


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, filled up (needs root; skipped where mounting is not allowed)."""
    mount = tmp_path / "full"
    mount.mkdir()
    if (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with open(mount / "filler", "wb") as f:
            try:
                f.write(b"\0" * (1 << 20))
            except OSError:
                pass
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_run_dir_on_a_full_disk_is_one_line(full_disk):
    proc = run_cli(*QUICK, f"hydra.run.dir={full_disk / 'run'}", timeout=120)
    assert proc.returncode == 2 and no_traceback(proc), proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "no space left" in line and "hydra.run.dir" in line


def test_adopting_a_folder_keeps_the_folders_the_launchers_write(tmp_path):
    """Each launcher names the folders it writes into a run dir (``run_dir_folders``: Slurm's slurm/, ...);
    the owner asks every launcher option's class for them, importing no launcher."""
    from cifar_dist.all_options import register_configs

    register_configs()
    folder = tmp_path / "mine"
    for name in ("slurm", "azureml", "batchai", "notes"):
        (folder / name).mkdir(parents=True)
    (folder / MARKER).touch()
    kept = claim(folder, Owner.ADOPTED, folder)
    assert sorted(p.name.split(".kept-")[0] for p in kept) == ["azureml", "batchai", "slurm"]
    assert (folder / "notes").is_dir()
