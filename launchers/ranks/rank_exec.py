"""The per-rank wrapper a multi-process launcher starts instead of the job itself.

``python -m cifar_dist.launchers.ranks.rank_exec --log-dir DIR [options] -- CMD...``
runs CMD as a child and

* writes the rank's whole output to ``DIR/rank.<N>.log`` (appended, one header
  per launch), and also passes rank 0's output through to the launcher's
  console, so only rank 0 streams while every rank keeps a log;
* records how the rank ended in ``DIR/rank.<N>.exit.json`` (exit code or
  signal, and when), which lets the launcher name the rank that failed first
  instead of the one the MPI runtime happened to notice;
* optionally binds the rank to its share of the cores (``--bind-cores``: what
  ``mpirun --bind-to core`` does, for runners that cannot bind, e.g. Gloo);
* appends ``--nonchief-arg`` arguments on ranks other than 0 (the launchers use
  this to keep those ranks from opening the run's shared Hydra log file);
* with ``--mpi-group G --group-size N`` (a concurrent sweep: one mpirun, one
  sweep point per group of N ranks) numbers the rank within its group, tells
  the child its group (``CIFAR_DIST_MPI_GROUP``, read by
  training/process/mpi_groups.py) and always exits 0, so that one point's failure
  does not make mpirun abort the other points (how it ended is in the exit
  record). Only group 0's rank 0 streams to the console.

With ``--launch ID`` (the launch id the run dir's guard wrote, see
cifar_dist/rundir/ranks_lock.py) the wrapper first holds the run dir's ranks'
lock shared, for as long as it lives, so that no new launch starts into the
run dir before this rank has ended and written its exit record; it does not
start at all (exit 2, nothing written) when the run dir already belongs to a
newer launch. The exit record carries the id: a later launch never reads it
as its own.

The child dies with the wrapper (PR_SET_PDEATHSIG), and SIGTERM/SIGINT/SIGHUP
are passed on, so a runtime that kills the wrapper never leaves a rank behind.
The wrapper in turn stops its rank when its own parent (mpirun, OpenMPI's
orted on another host, horovodrun's shell or the ssh session) goes away: the
kernel sends it SIGTERM then (PR_SET_PDEATHSIG), which is passed on, and a
watch on its parent pid catches the parent dying before that was set up.
So whatever kills the launcher, no rank keeps training into the run dir.

It runs once per rank, per launch, so it imports the standard library and, of cifar_dist, only the four modules
below and what they import of common/ (no Hydra, no NumPy, no TensorFlow): its packages' ``__init__.py`` files
import nothing (``launchers/__init__.py`` hands its names on lazily; ``tests/project/test_lazy_imports.py``).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence

from cifar_dist.common.atomic_files import write_json
from cifar_dist.common.environment import snapshot
from cifar_dist.launchers.ranks.heartbeat import HEARTBEAT_ENV, heartbeat_path
from cifar_dist.rundir.ranks_lock import StaleLaunch, hold_for_rank

# Slurm's srun sets SLURM_PROCID/SLURM_LOCALID for every task (with --mpi=pmix also PMIX_RANK);
# they come last: a batch script's own SLURM_PROCID=0 is inherited by ranks mpirun starts.
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
LOCAL_SIZE_VARS = ("OMPI_COMM_WORLD_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE")
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1
ORPHAN_CHECK_S = 1.0  # how often the wrapper checks that its parent (the runner) is alive
ORPHAN_KILL_GRACE_S = 5.0  # after SIGTERM to an orphaned rank: SIGKILL
# Names shared with cifar_dist.training.process.mpi_groups (not imported: stdlib only here).
GROUP_ENV = "CIFAR_DIST_MPI_GROUP"
MARKER_ENV = "CIFAR_DIST_MPI_MARKER"
MARKER_STATES = ("joined", "left")


def log_path(log_dir: Path, rank: int) -> Path:
    return Path(log_dir) / f"rank.{rank}.log"


def exit_record_path(log_dir: Path, rank: int) -> Path:
    return Path(log_dir) / f"rank.{rank}.exit.json"


def marker_prefix(log_dir: Path, rank: int) -> Path:
    """``<prefix>.joined`` / ``<prefix>.left``: how far a rank of a concurrent sweep got."""
    return Path(log_dir) / f"rank.{rank}"


def env_int(names: Sequence[str], default: Optional[int] = None) -> Optional[int]:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return default


def core_share(cores: Sequence[int], local_rank: int, local_size: int) -> List[int]:
    """The cores of one rank when ``local_size`` ranks split ``cores`` evenly
    (empty when there are fewer cores than ranks: then nothing is bound)."""
    cores = sorted(cores)
    if local_size < 1 or local_size > len(cores) or not 0 <= local_rank < local_size:
        return []
    per = len(cores) // local_size
    return cores[local_rank * per : (local_rank + 1) * per]


def _prctl_pdeathsig(sig: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _prctl_pdeathsig(signal.SIGKILL)


def stop_when_orphaned(
    parent: int, child: subprocess.Popen, interval: float = ORPHAN_CHECK_S, grace: float = ORPHAN_KILL_GRACE_S
) -> threading.Thread:
    """A daemon thread: once this process's parent is no longer ``parent``, SIGTERM the child, then SIGKILL."""

    def watch() -> None:
        while child.poll() is None:
            if os.getppid() != parent:
                child.terminate()
                try:
                    child.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    child.kill()
                return
            time.sleep(interval)

    thread = threading.Thread(target=watch, name="cifar_dist-orphan-watch", daemon=True)
    thread.start()
    return thread


def _pump(fd: int, sinks: Sequence) -> None:
    """Copy the child's output to every sink until it closes its end."""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        for sink in sinks:
            try:
                sink.write(chunk)
                sink.flush()
            except (OSError, ValueError):  # console gone: keep logging to the file
                pass


def run(
    log_dir: Path,
    command: List[str],
    bind_cores: bool = False,
    nonchief_args: Sequence[str] = (),
    mpi_group: Optional[int] = None,
    group_size: int = 1,
    launch: Optional[str] = None,
) -> int:
    parent = os.getppid()
    _prctl_pdeathsig(signal.SIGTERM)  # the runner dies: SIGTERM here, passed on to the rank (forward below)
    rank = env_int(RANK_VARS, 0)
    child_env = None
    if mpi_group is not None:
        rank -= mpi_group * group_size  # MPMD: group G holds world ranks G*N .. G*N+N-1
        prefix = marker_prefix(log_dir, rank)
        for state in MARKER_STATES:
            Path(f"{prefix}.{state}").unlink(missing_ok=True)
        child_env = {**snapshot(), GROUP_ENV: str(mpi_group), MARKER_ENV: str(prefix)}
    local_rank = env_int(LOCAL_RANK_VARS, 0)
    local_size = env_int(LOCAL_SIZE_VARS, 1)
    if bind_cores and hasattr(os, "sched_setaffinity"):
        share = core_share(os.sched_getaffinity(0), local_rank, local_size)
        if share:
            os.sched_setaffinity(0, share)  # inherited by the child
    if rank != 0:
        command = [*command, *nonchief_args]
    try:
        if launch:  # the lock's descriptor stays open (never inherited) until this wrapper exits
            hold_for_rank(log_dir.parent, launch, rank)
    except StaleLaunch as stale:
        print(f"cifar_dist: {stale}", file=sys.stderr, flush=True)
        return 2

    log_dir.mkdir(parents=True, exist_ok=True)
    record = exit_record_path(log_dir, rank)
    record.unlink(missing_ok=True)
    # The child touches this file while it runs; the launcher stops a job
    # whose rank goes quiet (launchers/ranks/heartbeat.py).
    alive = heartbeat_path(log_dir, rank)
    alive.unlink(missing_ok=True)
    child_env = {**(child_env or snapshot()), HEARTBEAT_ENV: str(alive)}
    log = open_rank_log(log_dir, rank, local_rank, local_size)

    chief = rank == 0 and not mpi_group  # streams to the console
    # The rank's training: a long-lived child, so no timeout (cifar_dist/common/external_commands.py is for short
    # commands); supervised instead: signals forwarded, dies with this wrapper, heartbeat file.
    child = subprocess.Popen(
        command,
        env=child_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if chief else log,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,
    )

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    stop_when_orphaned(parent, child)

    if chief:
        _pump(child.stdout.fileno(), [log, sys.stdout.buffer])
    returncode = child.wait()
    log.close()

    exit_code = write_exit_record(record, rank, child.pid, returncode, mpi_group, launch)
    return 0 if mpi_group is not None else exit_code


def open_rank_log(log_dir: Path, rank: int, local_rank: int, local_size: int):
    """The rank's log file, opened for appending, with a header naming the rank, its host and cores."""
    log = open(log_path(log_dir, rank), "ab")
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    log.write(
        f"==== rank {rank} (local {local_rank}/{local_size}) on {socket.gethostname()}, "
        f"cores {affinity}, started {time.strftime('%Y-%m-%d %H:%M:%S')} ====\n".encode()
    )
    log.flush()
    return log


def write_exit_record(
    record: Path, rank: int, pid: int, returncode: int, mpi_group: Optional[int], launch: Optional[str] = None
) -> int:
    """How the rank ended (exit code or signal), atomically: the launcher never reads half a record; tagged
    with its ``launch``, which is how a later launch tells it from its own ranks' records."""
    ended = {"rank": rank, "host": socket.gethostname(), "pid": pid, "time": time.time(), "launch": launch}
    if returncode < 0:
        ended.update(exit_code=128 - returncode, signal=-returncode, signal_name=signal.Signals(-returncode).name)
    else:
        ended.update(exit_code=returncode, signal=None, signal_name=None)
    if mpi_group is not None:
        ended["group"] = mpi_group
    write_json(record, ended)
    return ended["exit_code"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cifar_dist.launchers.ranks.rank_exec", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--log-dir", required=True, type=Path)
    parser.add_argument("--bind-cores", action="store_true")
    parser.add_argument("--nonchief-arg", action="append", default=[])
    parser.add_argument("--mpi-group", type=int, default=None)
    parser.add_argument("--group-size", type=int, default=1)
    parser.add_argument("--launch", default=None, help="the run dir's launch id (cifar_dist/rundir/ranks_lock.py)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    return run(args.log_dir, command, args.bind_cores, args.nonchief_arg, args.mpi_group, args.group_size, args.launch)


if __name__ == "__main__":
    sys.exit(main())
