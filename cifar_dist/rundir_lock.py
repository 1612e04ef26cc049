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
"""
from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Optional

from cifar_dist.errors import CifarDistError

LOCK_NAME = ".cifar_dist.lock"


class RunDirInUse(CifarDistError):
    """Another live process holds the run dir."""


class RunDirLock:
    """An exclusive, non-blocking lock on one run dir; ``release()`` or process exit ends it."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: Optional[int] = None

    def acquire(self) -> "RunDirLock":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (PEP 446)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 512).decode(errors="replace").strip() or "an unknown process"
            os.close(fd)
            raise RunDirInUse(
                f"run dir {self.run_dir} is in use by {holder}; wait for that run to end "
                "(or stop it), or choose another hydra.run.dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()} "
                      f"(since {time.strftime('%Y-%m-%d %H:%M:%S')})\n".encode(), 0)
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
