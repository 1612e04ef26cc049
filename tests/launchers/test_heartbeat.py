"""No hang: a rank that is stopped (SIGSTOP) ends a 2-rank mpirun job within a bounded time.

A rank that dies is covered by tests/launchers/test_launcher_mpirun.py
(test_a_killed_rank_stops_the_job_and_a_rerun_resumes: stop < 30 s). A rank
that is alive but late to a collective is Horovod's stall check
(HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, set from launcher.stall_shutdown_s).
A rank that does not run at all blocks Horovod's own coordination, so only
the launcher's heartbeat watch ends that job (launchers/ranks/heartbeat.py).
"""

import os
import shutil
import signal
import time

import pytest

from cifar_dist.launchers.ranks.heartbeat import HEARTBEAT_ENV, HeartbeatWatch, heartbeat_path, start_from_env
from helpers.cli import start_cli, tiny_cifar, wait_for
from helpers.mpirun_jobs import QUICK, processes_of, rank_pid


class Clock:
    now = 1000.0

    def __call__(self):
        return self.now


def test_heartbeat_watch_blames_the_rank_that_went_quiet_and_ignores_stale_files(tmp_path):
    clock = Clock()

    def beat(rank, t):
        os.utime(heartbeat_path(tmp_path, rank), ns=(t * 10**9, t * 10**9))

    for rank in (0, 1):  # rank 1's file is left from an earlier launch
        heartbeat_path(tmp_path, rank).write_text("")
    watch = HeartbeatWatch(tmp_path, np=2, timeout_s=10, clock=clock)
    assert watch() == ""
    for t in range(1, 31):  # a minute: rank 0 beats, rank 1's stale file never changes: not watched yet
        clock.now += 2
        beat(0, t)
        assert watch() == ""
    beat(1, 100)  # rank 1 starts beating, then freezes
    for t in range(31, 37):  # 10 s of silence: not more than the timeout yet
        clock.now += 2 if t > 31 else 0
        beat(0, t)
        assert watch() == ""
    clock.now += 2
    beat(0, 37)
    assert watch().startswith("rank 1 stopped responding (no heartbeat for 12s") and watch.stalled_rank == 1
    assert HeartbeatWatch(tmp_path, np=2, timeout_s=0, clock=clock)() == ""  # 0: off


def test_a_rank_beats_on_the_file_its_wrapper_named(tmp_path):
    path = tmp_path / "rank.0.alive"
    assert start_from_env({}) is None
    thread = start_from_env({HEARTBEAT_ENV: str(path)}, interval=0.05)
    assert thread.daemon
    wait_for(path.exists, 5, what="the first beat")
    first = path.stat().st_mtime_ns
    wait_for(lambda: path.stat().st_mtime_ns != first, 5, what="a second beat")


@pytest.mark.mpi
@pytest.mark.horovod
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
@pytest.mark.timeout(600)
def test_a_stopped_rank_ends_the_job_within_the_stall_timeout(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    proc = start_cli(
        "launcher=mpirun",
        "launcher.np=2",
        *QUICK,
        *tiny_cifar(tiny_data),  # after QUICK's debug=fast (the command line wins): its first checkpoint sooner
        "trainer.epochs=200",
        "launcher.stall_shutdown_s=10",  # the least allowed
        "launcher.kill_grace_s=1",  # a stopped rank ignores the runner's SIGINT: SIGKILL after the grace
        f"hydra.run.dir={run_dir}",
    )
    try:
        wait_for((run_dir / "checkpoints" / "checkpoint-001.h5").exists, 400, proc, "the first checkpoint")
        victim = rank_pid(run_dir, 1)
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.time()
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
        for pid in processes_of(run_dir):  # only if the job hung: leave nothing behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    took = time.time() - stopped_at
    assert proc.returncode not in (0, None), out[-3000:]
    # stall timeout 10 s + a beat (2 s) + the supervisor's poll + kill grace 1 s, with margin for a loaded machine
    assert took < 45, f"the job took {took:.0f}s to end"
    assert "rank 1 stopped responding (no heartbeat for" in out, out[-3000:]
    assert f"Last lines of {run_dir / 'logs' / 'rank.1.log'}" in out
    assert not processes_of(run_dir), "ranks left running"
    assert (run_dir / "checkpoints" / "checkpoint-001.h5").exists()
