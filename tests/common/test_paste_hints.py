"""Hints that print a path for the user to paste into a shell quote it (issue 31, hostile 13): pasting
runs nothing the path holds, and Hydra reads the path back unchanged."""

import shlex
import subprocess
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from cifar_dist.config.override_syntax import quote_override_value
from cifar_dist.launchers.ranks.rank_failure import first_failure
from cifar_dist.rundir.owner import ForeignRunDir, refuse_foreign
from helpers.cli import assert_ok, run_cli

HOSTILE = 'run $(touch PWNED) `touch PWNED2`; it\'s "x"'


def pasted(command: str, cwd: Path) -> list:
    """What ``command`` passes to its program when pasted into bash (the program prints its arguments)."""
    program = shlex.split(command)[0]
    script = f'{program}() {{ printf "%s\\n" "$@"; }}; {command}'
    out = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def no_side_effects(cwd: Path) -> bool:
    return not list(cwd.rglob("PWNED*"))


def test_the_slurm_dry_runs_sbatch_hint_pastes_as_the_script_path(tmp_path):
    run_dir = tmp_path / HOSTILE
    proc = run_cli(
        "data=sample", "launcher=slurm", "launcher.dry_run=true", f"hydra.run.dir={quote_override_value(str(run_dir))}"
    )
    assert_ok(proc)
    hint = next(line for line in proc.stdout.splitlines() if "submit it by hand with: " in line)
    command = hint.split("submit it by hand with: ", 1)[1]
    args = pasted(command, tmp_path)
    assert len(args) == 1 and Path(args[0]).is_file() and Path(args[0]).parent.parent == run_dir, (command, args)
    assert no_side_effects(tmp_path)


def test_re_run_with_hydra_run_dir_pastes_as_the_run_dir(tmp_path):
    run_dir = tmp_path / HOSTILE
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "checkpoint-001.h5").write_bytes(b"")  # the hint is for a run that has one to resume
    message = first_failure(tmp_path / "logs", 1, since=0.0, runner_output="").message(run_dir)
    word = message.split("re-run with ", 1)[1].rsplit(" to resume", 1)[0]
    (arg,) = pasted(f"python {word}", tmp_path)
    assert OverridesParser.create().parse_override(arg).value() == str(run_dir), (word, arg)
    assert no_side_effects(tmp_path)


def test_adopting_a_foreign_run_dir_pastes_as_touching_its_marker(tmp_path):
    run_dir = tmp_path / HOSTILE
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine")
    with pytest.raises(ForeignRunDir) as err:
        refuse_foreign(run_dir)
    command = str(err.value).split(" with: ", 1)[1]
    args = pasted(command, tmp_path)
    assert len(args) == 1 and Path(args[0]).parent == run_dir, (command, args)
    assert no_side_effects(tmp_path)
