"""One writer per run dir: an ``flock`` on ``<run dir>/.cifar_dist.lock``.

Two runs started into one run dir would interleave ``training_log.csv`` and
the job log, and each would delete the other's in-flight temp files. The
process that launches a job (never its ranks, which share the dir and are
its children) holds an exclusive ``flock`` on the lock file for as long as
the job runs, and writes its pid, host and start time into it. A second run
fails at once with one line naming that holder. The kernel drops the lock
when the holder's process ends in any way (kill -9 included), so a lock left
by a killed run never blocks the re-run: only a live holder counts. On NFS,
Linux maps ``flock`` to NFS byte-range locks, which hold across hosts.

A cluster job holds it where it runs: its batch script opens the lock file
on a descriptor the whole job keeps and has ``lock_fd`` lock it there
(``launchers/slurm/rundir_hold.py``); the record then starts with the job,
``Slurm job 12_3: pid 4711 on host node1 (since ...)``, so a second writer is
refused with the job id, host and pid. ``holder_job`` reads the job back
(a re-run that follows its own job recognises it), and the holder may add
what it does to its record (``note_holder``: the launcher following a job).
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import time
from pathlib import Path
from typing import Optional

from cifar_dist.common.errors import CifarDistError

LOCK_NAME = ".cifar_dist.lock"
_JOB = re.compile(r"^(\S+ job \S+): pid ")
_PROCESS = re.compile(r"pid (\d+) on host (\S+)")


class RunDirInUse(CifarDistError):
    """Another live process holds the run dir; ``holder`` is its record."""

    def __init__(self, run_dir: Path, holder: str):
        super().__init__(
            f"run dir {run_dir} is in use by {holder}; wait for that run to end "
            "(or stop it), or choose another hydra.run.dir"
        )
        self.holder = holder


def holder_job(holder: str) -> Optional[str]:
    """The cluster job a lock record names as its holder ("Slurm job 12_3"), or None."""
    match = _JOB.match(holder)
    return match.group(1) if match else None


def lock_fd(fd: int, run_dir: Path, job: Optional[str] = None) -> None:
    """Lock the open lock file ``fd`` (held while any process keeps that open file) and record
    the holder: this process, or ``job`` (e.g. "Slurm job 12") run by this process."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunDirInUse(run_dir, read_holder(fd)) from None
    write_holder(fd, job)


def in_use(run_dir: Path) -> bool:
    """Whether a live process (or a cluster job) holds ``run_dir``'s lock now; looked at without taking it for
    long and without writing anything there (a sweep asking whether another sweep still runs a point)."""
    try:
        fd = os.open(Path(run_dir) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False  # no lock file: nobody ever launched into it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops the lock it may have taken
    return False


def read_holder(fd: int) -> str:
    return os.pread(fd, 512, 0).decode(errors="replace").strip() or "an unknown process"


def write_holder(fd: int, job: Optional[str] = None) -> None:
    """The record: this process, or for ``job`` the batch script that started this helper (its parent)."""
    who = f"{job}: " if job else ""
    record = (
        f"{who}pid {os.getppid() if job else os.getpid()} on host {socket.gethostname()} "
        f"(since {time.strftime('%Y-%m-%d %H:%M:%S')})\n"
    )
    os.ftruncate(fd, 0)
    os.pwrite(fd, record.encode(), 0)


def note_holder(run_dir: Path, note: str) -> bool:
    """Add ``note`` (", following Slurm job 12") to the record if this process holds the lock."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        holder = read_holder(fd)
        match = _PROCESS.search(holder)
        if (
            holder_job(holder)
            or not match
            or (int(match.group(1)), match.group(2)) != (os.getpid(), socket.gethostname())
        ):
            return False
        record = holder.split(")", 1)[0] + ")" + note + "\n"
        os.pwrite(fd, record.encode(), 0)
        os.ftruncate(fd, len(record.encode()))
        return True
    finally:
        os.close(fd)


class RunDirLock:
    """An exclusive, non-blocking lock on one run dir; ``release()`` or process exit ends it."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: Optional[int] = None

    def acquire(self) -> RunDirLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (PEP 446)
        try:
            lock_fd(fd, self.run_dir)
        except RunDirInUse:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        # The file stays: deleting it would let a third run lock a new inode
        # while a second one still waits on the old one.
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None
