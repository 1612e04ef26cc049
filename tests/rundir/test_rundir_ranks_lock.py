"""One writer per run dir, also after a crash (issue 37, item 2).

A launcher killed with -9 loses its run-dir lock at once, but its ranks live
on for seconds: a re-run started 0.5 s later shared the run dir with them,
and read the "killed by signal 9" record the old rank 0 wrote as its own
failure. Now every rank's wrapper holds the run dir's ranks' lock shared
while it lives, a new launch waits (bounded) for it, and exit records carry
their launch's id (cifar_dist/rundir/ranks_lock.py). The "old rank" here is a
real ``rank_exec`` wrapper of an earlier launch around a small child.
"""

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cifar_dist.launchers.ranks.rank_failure import first_failure, read_exit_records
from cifar_dist.rundir.ranks_lock import RANKS_LOCK_NAME, LaunchStart, OldRanksAlive, current_launch
from helpers.cli import cli_env, start_cli, wait_for
from helpers.paths import REPO


def start_old_rank(run_dir: Path, launch: str, child: str) -> subprocess.Popen:
    """A rank of ``launch``: ``rank_exec`` (rank 0) around ``python -c child``, signed in to the ranks' lock."""
    return subprocess.Popen(
        [sys.executable, "-m", "cifar_dist.launchers.ranks.rank_exec", "--log-dir", str(run_dir / "logs")]
        + ["--launch", launch, "--", sys.executable, "-c", child],
        cwd=REPO,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def signed_in(run_dir: Path, wrapper: subprocess.Popen) -> bool:
    return f"pid {wrapper.pid} " in (run_dir / RANKS_LOCK_NAME).read_text()


KILLED_BY_9 = "import os; os.kill(os.getpid(), 9)"


def test_an_exit_record_of_an_earlier_launch_is_not_the_new_launchs_failure(tmp_path):
    """A rank of the old launch dies by SIGKILL and writes its record after the new launch has started."""
    old = LaunchStart(tmp_path).start()
    wrapper = start_old_rank(tmp_path, old, KILLED_BY_9)
    assert wrapper.wait(timeout=60) == 128 + signal.SIGKILL, wrapper.stderr.read()
    new = LaunchStart(tmp_path).start()
    logs = tmp_path / "logs"
    (stale,) = read_exit_records(logs, 1, since=0, launch=old)
    assert stale["signal_name"] == "SIGKILL" and stale["launch"] == old  # tagged by the real wrapper
    assert read_exit_records(logs, 1, since=0, launch=new) == []
    failure = first_failure(logs, 1, since=0, runner_output="", launch=new)
    assert failure.rank is None and "signal 9" not in failure.how
    assert first_failure(logs, 1, since=0, runner_output="", launch=old).how == "was killed by signal 9 (SIGKILL)"


def test_a_live_rank_of_an_earlier_launch_keeps_the_run_dir_and_a_late_one_never_starts(tmp_path):
    old = LaunchStart(tmp_path).start()
    wrapper = start_old_rank(tmp_path, old, "import time; time.sleep(600)")
    try:
        wait_for(lambda: signed_in(tmp_path, wrapper), 60, wrapper, "the old rank to hold the ranks' lock")
        before = sorted(p.name for p in tmp_path.rglob("*"))
        started = time.monotonic()
        with pytest.raises(OldRanksAlive) as refused:
            LaunchStart(tmp_path, wait_s=1).wait_for_old_ranks()
        assert 1 <= time.monotonic() - started < 5
        line = str(refused.value)
        assert "\n" not in line and f"rank 0 (pid {wrapper.pid} on host {socket.gethostname()})" in line
        assert old in line and sorted(p.name for p in tmp_path.rglob("*")) == before
        assert current_launch(tmp_path) == old  # the refused launch wrote nothing
        wrapper.send_signal(signal.SIGKILL)  # the kernel drops its lock; its child dies with it (PDEATHSIG)
        wrapper.wait(timeout=30)
        waiting = LaunchStart(tmp_path, wait_s=10)
        waiting.wait_for_old_ranks()
        new = waiting.start()
    finally:
        wrapper.kill()
    assert current_launch(tmp_path) == new != old
    ran = tmp_path / "ran"
    late = start_old_rank(tmp_path, old, f"open({str(ran)!r}, 'w')")  # its mpirun was still starting ranks
    assert late.wait(timeout=60) == 2
    assert f"launch {old} does not start" in late.stderr.read()
    assert not (tmp_path / "logs" / "rank.0.exit.json").exists() and not ran.exists()


# An old rank that writes ``tick`` ("alone") every 0.1 s until ``die`` exists, then dies by SIGKILL. If ``watched``
# changes meanwhile (a new launch wrote into the run dir while it lived) it writes "overlap" and dies at once.
WRITES_UNTIL_A_NEW_LAUNCH_WRITES = """
import os, time
tick, watched, die, until = {tick!r}, {watched!r}, {die!r}, time.time() + 300
first = os.stat(watched).st_mtime_ns
while time.time() < until and not os.path.exists(die):
    if os.stat(watched).st_mtime_ns != first:
        open(tick, "w").write("overlap")
        break
    open(tick, "w").write("alone")
    time.sleep(0.1)
os.kill(os.getpid(), 9)
"""


@pytest.mark.mpi
@pytest.mark.timeout(600)
def test_a_rerun_after_the_launcher_was_killed_waits_for_its_ranks_and_ignores_their_records(
    half_run, half_run_overrides, tmp_path
):
    """As the issue saw it: the old rank 0 outlives its killed launcher, writing into the run dir, then dies by
    SIGKILL and its wrapper writes ``logs/rank.0.exit.json``. The re-run, started at once, must not write before that
    rank has gone, nor stop for that record (``launcher.rank_failure_grace_s=1``: a failed rank's record older than
    1 s stops the job). The old rank dies once the re-run says it waits for it."""
    run_dir = tmp_path / "run"
    shutil.copytree(half_run, run_dir)
    tick, config = run_dir / "checkpoints" / "old-rank-wrote-this", run_dir / ".hydra" / "config.yaml"
    die = tmp_path / "die"
    old = LaunchStart(run_dir).start()
    child = WRITES_UNTIL_A_NEW_LAUNCH_WRITES.format(tick=str(tick), watched=str(config), die=str(die))
    wrapper = start_old_rank(run_dir, old, child)
    try:
        wait_for(lambda: signed_in(run_dir, wrapper), 60, wrapper, "the old rank to hold the ranks' lock")
        with open(tmp_path / "rerun.out", "w") as out:
            proc = start_cli(
                *half_run_overrides,
                "launcher=mpirun",
                "launcher.np=1",
                "launcher.rank_failure_grace_s=1",
                f"hydra.run.dir={run_dir}",
                stdout=out,
                stderr=subprocess.PIPE,
            )
            err = ""
            for line in proc.stderr:  # until the re-run waits (or ends: then it did not wait, and fails below)
                err += line
                if "waiting up to 30s for rank 0" in line:
                    break
            time.sleep(0.5)  # it keeps waiting while the old rank lives
            die.touch()
            err += proc.stderr.read()
            proc.wait(timeout=500)
    finally:
        wrapper.kill()
    assert proc.returncode == 0, (tmp_path / "rerun.out").read_text()[-3000:] + err[-3000:]
    assert tick.read_text() == "alone"  # the new launch wrote nothing into the run dir while the old rank lived
    assert f"waiting up to 30s for rank 0 (pid {wrapper.pid} on host {socket.gethostname()})" in err
    record = json.loads((run_dir / "logs" / "rank.0.exit.json").read_text())
    assert record["launch"] == current_launch(run_dir) != old and record["exit_code"] == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["complete"] and metrics["resumed_from_epoch"] == 1 and len(metrics["epochs"]) == 2
