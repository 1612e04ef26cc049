"""The pieces under the multi-rank launchers, each on its own and without MPI:
host lists, the per-rank wrapper, blaming the right rank, stopping a process tree."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cifar_dist.common.log_tail import tail
from cifar_dist.launchers.base import LaunchError
from cifar_dist.launchers.ranks.hosts import Host, check_slots, is_local, parse_host, parse_hostfile
from cifar_dist.launchers.ranks.rank_exec import core_share
from cifar_dist.launchers.ranks.rank_failure import HOROVOD_SHUTDOWN, first_failure
from helpers.cli import assert_ok
from helpers.paths import REPO

# ---- hosts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, host",
    [
        ("node1", Host("node1", None)),
        ("node1:4", Host("node1", 4)),
        ("169.254.7.2:2", Host("169.254.7.2", 2)),
        ("[fd00::2]:3", Host("fd00::2", 3)),
        ("fd00::2", Host("fd00::2", None)),
    ],
)
def test_parse_host(spec, host):
    assert parse_host(spec) == host


@pytest.mark.parametrize("spec", ["node:0", "node:x", " "])
def test_parse_host_rejects(spec):
    with pytest.raises(LaunchError):
        parse_host(spec)


def test_hostfile(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# two nodes\nnode1 slots=4 max_slots=8\n\nnode2   # no slots\n")
    assert parse_hostfile(path) == [Host("node1", 4), Host("node2", None)]
    path.write_text("# nothing\n")
    with pytest.raises(LaunchError, match="names no host"):
        parse_hostfile(path)
    with pytest.raises(LaunchError, match="cannot read launcher.hostfile"):
        parse_hostfile(tmp_path / "missing")


def test_slots_and_local_names():
    check_slots(4, [Host("a", 2), Host("b", 2)], oversubscribe=False)
    with pytest.raises(LaunchError, match="exceeds the 3 slots"):
        check_slots(4, [Host("a", 2), Host("b", None)], oversubscribe=False)
    check_slots(4, [Host("a", 2), Host("b", None)], oversubscribe=True)
    assert is_local("localhost") and is_local("127.0.0.1")
    assert not is_local("node-that-does-not-exist.invalid")


@pytest.mark.parametrize(
    "cores, rank, size, share",
    [
        ([0, 1], 0, 2, [0]),
        ([0, 1], 1, 2, [1]),
        ([0, 1], 0, 1, [0, 1]),
        ([0, 1, 2, 3, 4], 1, 2, [2, 3]),
        ([0, 1], 0, 3, []),
    ],
)
def test_core_share(cores, rank, size, share):
    assert core_share(cores, rank, size) == share


# ---- the per-rank wrapper ---------------------------------------------------------


def run_wrapper(tmp_path, rank, code, *extra, env=None, **kw):
    env = {**os.environ, "OMPI_COMM_WORLD_RANK": str(rank), **(env or {})}
    env.pop("CIFAR_DIST_CHILD", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cifar_dist.launchers.ranks.rank_exec",
            "--log-dir",
            str(tmp_path / "logs"),
            "--nonchief-arg=extra-arg",
            *extra,
            "--",
            sys.executable,
            "-c",
            code,
            "x",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        **kw,
    )


def test_wrapper_logs_every_rank_streams_rank_zero_and_records_the_exit(tmp_path):
    code = "import sys; print('hello', sys.argv[1:]); print('oops', file=sys.stderr); sys.exit(3)"
    chief = run_wrapper(tmp_path, 0, code)
    other = run_wrapper(tmp_path, 1, code)
    assert chief.returncode == other.returncode == 3
    assert "hello ['x']" in chief.stdout and "oops" in chief.stdout  # rank 0: console too
    assert other.stdout == ""  # other ranks: their log only
    log1 = (tmp_path / "logs" / "rank.1.log").read_text()
    assert "==== rank 1" in log1 and "hello ['x', 'extra-arg']" in log1 and "oops" in log1
    assert "hello ['x']" in (tmp_path / "logs" / "rank.0.log").read_text()
    record = json.loads((tmp_path / "logs" / "rank.1.exit.json").read_text())
    assert (record["rank"], record["exit_code"], record["signal"]) == (1, 3, None)

    again = run_wrapper(tmp_path, 1, "print('second launch')")
    assert_ok(again)
    log1 = (tmp_path / "logs" / "rank.1.log").read_text()
    assert log1.count("==== rank 1") == 2 and "hello" in log1  # appended: earlier launches stay readable


def test_wrapper_binds_its_rank_to_a_core_share(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs 2 cores")
    code = "import os; print('cores', sorted(os.sched_getaffinity(0)))"
    proc = run_wrapper(tmp_path, 0, code, "--bind-cores", env={"HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2"})
    per = len(cores) // 2
    assert f"cores {cores[per : 2 * per]}" in proc.stdout


def test_child_dies_with_a_killed_wrapper_and_signals_are_recorded(tmp_path):
    code = "import os, time; open(os.environ['PIDFILE'], 'w').write(str(os.getpid())); time.sleep(60)"
    pidfile = tmp_path / "child.pid"
    env = {**os.environ, "OMPI_COMM_WORLD_RANK": "1", "PIDFILE": str(pidfile)}
    wrapper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cifar_dist.launchers.ranks.rank_exec",
            "--log-dir",
            str(tmp_path / "logs"),
            "--",
            sys.executable,
            "-c",
            code,
        ],
        cwd=REPO,
        env=env,
    )
    deadline = time.time() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.time() < deadline
        time.sleep(0.1)
    child = int(pidfile.read_text())
    os.kill(child, signal.SIGKILL)  # a rank killed from outside: the wrapper records it
    assert wrapper.wait(timeout=10) == 128 + 9
    record = json.loads((tmp_path / "logs" / "rank.1.exit.json").read_text())
    assert (record["exit_code"], record["signal_name"]) == (137, "SIGKILL")

    pidfile.unlink()
    wrapper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cifar_dist.launchers.ranks.rank_exec",
            "--log-dir",
            str(tmp_path / "logs"),
            "--",
            sys.executable,
            "-c",
            code,
        ],
        cwd=REPO,
        env=env,
    )
    while not pidfile.exists() or not pidfile.read_text():
        assert time.time() < deadline + 30
        time.sleep(0.1)
    child = int(pidfile.read_text())
    wrapper.kill()  # the wrapper killed (as mpirun does after its grace period): the rank goes too
    wrapper.wait()
    for _ in range(50):
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the rank outlived its wrapper")


# ---- blaming the right rank -------------------------------------------------------


def write_rank(log_dir, rank, when, code, text, sig=None):
    log_dir.mkdir(exist_ok=True)
    (log_dir / f"rank.{rank}.log").write_text(text)
    (log_dir / f"rank.{rank}.exit.json").write_text(
        json.dumps({"rank": rank, "host": "vm", "pid": 1, "time": when, "exit_code": code, "signal": sig})
    )


def test_the_rank_that_failed_first_is_blamed_not_horovods_victims(tmp_path):
    logs = tmp_path / "logs"
    # Rank 0 noticed first (Horovod shut down under it) but rank 1 is the cause.
    write_rank(logs, 0, 105.0, 1, f"Epoch 2/3\ntensorflow...UnknownError: {HOROVOD_SHUTDOWN}. This was caused by...\n")
    write_rank(logs, 1, 106.0, 3, "Epoch 2/3\nTraceback (most recent call last):\nValueError: bad batch\n")
    failure = first_failure(logs, 2, since=100.0, runner_output="Process name: [[1,1],0]\n  Exit code:    1")
    assert failure.rank == 1 and failure.how == "exited with code 3" and "ValueError: bad batch" in failure.log_tail
    message = failure.message(tmp_path)
    assert message.startswith("rank 1 on vm exited with code 3; the whole job was stopped.")
    # (no checkpoint was written before rank 1 failed: nothing to resume, and no hint to re-run for it)
    assert message.endswith("No checkpoint was written: nothing to resume.") and "re-run with" not in message

    # A rank whose wrapper was killed leaves no record: the runner's report
    # wins over the ranks the runner then tore down with SIGTERM.
    write_rank(logs, 0, 305.0, 143, "Epoch 2/3\n", sig=15)
    (logs / "rank.1.exit.json").unlink()
    failure = first_failure(
        logs,
        2,
        since=300.0,
        runner_output=("mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."),
    )
    assert (failure.rank, failure.how) == (1, "was killed by signal 9 (SIGKILL)")
    assert failure.log == logs / "rank.1.log"

    # Records from an earlier launch do not count; the runner's report does.
    failure = first_failure(
        logs,
        2,
        since=200.0,
        runner_output=("mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."),
    )
    assert (failure.rank, failure.how) == (1, "was killed by signal 9 (SIGKILL)")


@pytest.mark.parametrize(
    "output, rank, how",
    [
        ("Process name: [[29483,1],1]\n  Exit code:    2", 1, "exited with code 2"),
        ("Process 3 exit with status code 1.", 3, "exited with code 1"),
        ("nothing useful", None, "failed before any rank reported"),
    ],
)
def test_runner_messages_name_the_rank(tmp_path, output, rank, how):
    failure = first_failure(tmp_path / "logs", 4, since=0, runner_output=output)
    assert (failure.rank, failure.how) == (rank, how)


def test_tail_keeps_what_a_progress_bar_last_showed(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"start\n 1/9 [..] - loss: 2.3\r 2/9 [=.] - loss: 2.2\r 3/9 [==] - loss: 2.1\nValueError: x\n")
    assert tail(path, 2) == " 3/9 [==] - loss: 2.1\nValueError: x"


# ---- stopping a process tree ------------------------------------------------------

RUNNER = textwrap.dedent("""
    # A runner that, like mpirun, puts its rank in a process group of its own,
    # and on SIGINT exits without taking it down.
    import os, signal, subprocess, sys, time
    rank = subprocess.Popen([sys.executable, "-c",
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(os.environ['PIDFILE'], 'w').write(str(os.getpid())); time.sleep(120)"], start_new_session=True)
    signal.signal(signal.SIGINT, lambda *a: sys.exit(1))
    print("runner up, rank pid", rank.pid, flush=True)
    if sys.argv[1:] == ["orphan"]:
        sys.exit(0)  # gone before the supervisor could see its rank
    time.sleep(120)
""")

SUPERVISE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from cifar_dist.launchers.ranks.runner_supervisor import Supervisor
    import os
    # "watch": stop as soon as the rank is up (as when another rank has failed).
    rank_up = lambda: Path(os.environ["PIDFILE"]).exists() and Path(os.environ["PIDFILE"]).read_text()
    watch = (lambda: "told to stop" if rank_up() else "") if sys.argv[2] == "watch" else None
    out = Supervisor([sys.executable, sys.argv[1], sys.argv[2]], cwd=Path.cwd(), env=dict(os.environ),
                     log_file=Path(sys.argv[3]), kill_grace_s=2, watch=watch).run()
    print("RESULT", out.returncode, out.interrupted, repr(out.stopped_reason), flush=True)
""")


@pytest.mark.parametrize("how", ["ctrl-c", "watch"])
def test_supervisor_leaves_no_process_behind(tmp_path, how):
    (tmp_path / "runner.py").write_text(RUNNER)
    (tmp_path / "supervise.py").write_text(SUPERVISE)
    pidfile = tmp_path / "rank.pid"
    env = {**os.environ, "PIDFILE": str(pidfile), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            str(tmp_path / "supervise.py"),
            str(tmp_path / "runner.py"),
            "watch" if how == "watch" else "none",
            str(tmp_path / "runner.log"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.time() < deadline
        time.sleep(0.1)
    rank = int(pidfile.read_text())
    started = time.time()
    if how == "ctrl-c":
        proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert time.time() - started < 10
    result = out.strip().splitlines()[-1]
    assert result.startswith("RESULT")
    assert ("True" in result) == (how == "ctrl-c")
    assert ("told to stop" in result) == (how == "watch")
    assert not Path(f"/proc/{rank}").exists() or Path(f"/proc/{rank}/stat").read_text().split()[2] == "Z"
    assert "runner up" in (tmp_path / "runner.log").read_text()


def test_supervisor_kills_ranks_orphaned_before_it_saw_them(tmp_path):
    (tmp_path / "runner.py").write_text(RUNNER)
    (tmp_path / "supervise.py").write_text(SUPERVISE)
    env = {**os.environ, "PIDFILE": str(tmp_path / "rank.pid"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "supervise.py"),
            str(tmp_path / "runner.py"),
            "orphan",
            str(tmp_path / "runner.log"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "RESULT 0 False ''" in proc.stdout
    rank = int((tmp_path / "runner.log").read_text().split("rank pid")[1].split()[0])
    assert not Path(f"/proc/{rank}").exists() or Path(f"/proc/{rank}/stat").read_text().split()[2] == "Z"


def test_launchers_refuse_an_engine_by_its_facts_not_its_name(monkeypatch):
    """What a launcher cannot start is a property of the engine (cifar_dist/common/engine_facts.py): an engine
    named like none of today's, with JAX's or the one-process engine's facts, is refused as they are."""
    import dataclasses

    from cifar_dist.common import engine_facts
    from cifar_dist.launchers.batchai.launcher import BatchAILauncher
    from cifar_dist.launchers.gloo import GlooLauncher
    from cifar_dist.launchers.local import LocalLauncher
    from cifar_dist.launchers.mpirun import MpirunLauncher

    like_jax = dataclasses.replace(engine_facts.JAX, name="likejax")
    one_process = dataclasses.replace(engine_facts.TENSORFLOW, name="single", multi_process=False)
    monkeypatch.setitem(engine_facts.ENGINES, like_jax.name, like_jax)
    monkeypatch.setitem(engine_facts.ENGINES, one_process.name, one_process)

    assert "engine=likejax processes cannot join" in GlooLauncher(np=2).engine_problems("likejax")[0]
    assert "engine=likejax" in BatchAILauncher(node_count=1).engine_problems("likejax")[0]
    assert "engine=likejax joins the whole mpirun" in MpirunLauncher(np=2, concurrent=2).engine_problems("likejax")[0]
    assert MpirunLauncher(np=2).engine_problems("likejax") == []
    assert "engine=single trains in one process" in MpirunLauncher(np=2).engine_problems("single")[0]
    assert LocalLauncher().engine_problems("single") == []
    assert all(launcher.engine_problems("auto") == [] for launcher in (GlooLauncher(np=2), LocalLauncher()))
