"""Short external commands have one timeout policy (cifar_dist/common/external_commands.py, issue 32): a
command past its timeout is killed and reported in one line that says what to do, and no other
module starts a process except the two supervisors of long-lived children."""

import ast
import time
from pathlib import Path

import pytest

from cifar_dist.common.external_commands import CommandTimedOut, run_command
from cifar_dist.launchers.base import LaunchError
from cifar_dist.launchers.ranks.hosts import Host, check_reachable

REPO = Path(__file__).resolve().parents[2]
# Long-lived children, supervised instead of timed out (each says so where it starts them).
SUPERVISORS = {"launchers/ranks/rank_exec.py", "launchers/ranks/runner_supervisor.py"}
STARTERS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


def process_starts(path: Path) -> list:
    """``subprocess.<starter>`` calls and ``os.system``/``os.popen`` in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id == "subprocess" and node.attr in STARTERS) or (
                node.value.id == "os" and node.attr in ("system", "popen")
            ):
                found.append(f"{node.value.id}.{node.attr}")
    return found


def test_a_command_past_its_timeout_is_killed_and_reported_in_one_line():
    started = time.monotonic()
    with pytest.raises(CommandTimedOut) as caught:
        run_command(["sleep", "30"], "waiting for the thing", "start the thing, then re-run", timeout_s=0.5)
    assert time.monotonic() - started < 10
    expected = "waiting for the thing did not answer within 0.5s (sleep 30); start the thing, then re-run"
    assert str(caught.value) == expected


def test_a_launcher_gets_its_own_error_and_a_finished_command_its_output():
    with pytest.raises(LaunchError, match=r"^x did not answer within 0.2s \(sleep 5\); y$"):
        run_command(["sleep", "5"], "x", "y", timeout_s=0.2, error=LaunchError)
    done = run_command(["sh", "-c", "echo out; echo err >&2; exit 3"], "x", "y")
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_a_host_check_that_hangs_says_what_to_do(tmp_path):
    hanging = tmp_path / "hang"
    hanging.write_text("#!/bin/sh\nsleep 30\n")
    hanging.chmod(0o755)
    with pytest.raises(LaunchError, match=r"^host node-x did not answer within 0.5s .*drop it from launcher.hosts$"):
        check_reachable([Host("node-x", None)], [str(hanging)], timeout_s=0.5)


def test_only_the_supervisors_of_long_lived_children_start_processes_themselves():
    sources = sorted((REPO / "cifar_dist").rglob("*.py")) + sorted((REPO / "launchers").rglob("*.py"))
    assert len(sources) > 100, len(sources)
    starts = {str(p.relative_to(REPO)): process_starts(p) for p in sources}
    own = {"cifar_dist/common/external_commands.py", *SUPERVISORS}
    assert {path: calls for path, calls in starts.items() if calls and path not in own} == {}
    assert all(starts[path] for path in own)  # the check looks where the starts are


def test_the_check_finds_a_plain_subprocess_run(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import subprocess\ndef f():\n    return subprocess.run(['true'])\n")
    assert process_starts(module) == ["subprocess.run"]
