"""The run dir stays locked until the last rank of its previous job has exited.

The launcher's lock (``lock.py``) dies with the launcher. Its ranks do not:
after a kill -9 of the launcher they take seconds to be torn down, and in
that time they still write checkpoints and their ``logs/rank.N.exit.json``
into the run dir, which a re-run started at once took for its own (two
writers in one dir, and a stale "killed by signal 9" as the new job's error).

So the ranks hold a lock of their own, ``<run dir>/.cifar_dist.ranks.lock``:
every rank's wrapper (``rank_exec``) takes it shared (``flock LOCK_SH``, on a
descriptor no child inherits) for as long as its rank lives, and the kernel
drops it when the wrapper ends in any way. A new launch (the run dir's guard,
``guard.py``) must get it exclusively, waiting up to ``OLD_RANKS_WAIT_S`` for
the old ranks to go, and is refused in one line naming them if they do not.
The launcher cannot hold it while its own ranks run (they need it shared),
so it is taken only to start a launch: with it held exclusively, the guard
writes a new launch id into the file. A rank checks, once it holds the lock
shared, that the file still names its own launch; a rank of an earlier launch
that starts this late (its mpirun was still spawning) sees another id and
never runs. Each rank appends its pid and host below the id, which is how a
refusal names the ranks still alive. Every exit record carries its launch id,
so a launch reads only its own (``rank_failure.read_exit_records``).

Only the standard library and ``cifar_dist.common.errors``: ``rank_exec`` imports this.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import List, Optional

from cifar_dist.common.errors import CifarDistError

RANKS_LOCK_NAME = ".cifar_dist.ranks.lock"
OLD_RANKS_WAIT_S = 30.0  # a launcher killed -9: its ranks are torn down in about 5-15 s (kill grace included)
RANK_WAIT_S = 10.0  # a rank waits this long for a launch that is writing its id (a moment)
POLL_S = 0.1
_LAUNCH = "launch "
_RANK = "rank "


class OldRanksAlive(CifarDistError):
    """Ranks of an earlier launch still hold the run dir after the wait."""


class StaleLaunch(CifarDistError):
    """A rank's launch is no longer the run dir's launch: a newer one has started."""


def ranks_lock_path(run_dir: Path) -> Path:
    return Path(run_dir) / RANKS_LOCK_NAME


def current_launch(run_dir: Path) -> Optional[str]:
    """The launch id the run dir's last launch wrote (None: none yet, e.g. a dir of an earlier version)."""
    try:
        first = ranks_lock_path(run_dir).read_text("utf-8", errors="replace").split("\n", 1)[0]
    except OSError:
        return None
    if not first.startswith(_LAUNCH):
        return None
    return first[len(_LAUNCH) :].split(" ", 1)[0] or None


def _flock_within(fd: int, how: int, seconds: float) -> bool:
    """``flock(fd, how)``, retried without blocking for up to ``seconds`` (a wait that cannot hang)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


def _alive_here(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_ranks(text: str) -> List[str]:
    """``rank 0 (pid 4711 on host vm)`` for each rank line of the lock file whose process may still run
    (on this host: is alive; on another host: cannot tell, so named)."""
    here, names = socket.gethostname(), []
    for line in text.splitlines():
        if not line.startswith(_RANK):
            continue
        rank, _, where = line[len(_RANK) :].partition(": ")  # "pid 4711 on host vm"
        fields = where.split()
        if len(fields) == 5 and fields[1].isdigit() and (fields[4] != here or _alive_here(int(fields[1]))):
            names.append(f"rank {rank} ({where})")
    return names


def _refusal(run_dir: Path, fd: int, waited: float) -> OldRanksAlive:
    text = os.pread(fd, 65536, 0).decode(errors="replace")
    launch = current_launch(run_dir) or "an earlier launch"
    ranks = ", ".join(live_ranks(text)) or "its rank processes"
    return OldRanksAlive(
        f"run dir {run_dir} is still in use by ranks of {launch}, whose launcher has gone: {ranks}; "
        f"waited {waited:g}s for them to exit; stop them (or wait), then re-run, or choose another hydra.run.dir"
    )


class LaunchStart:
    """The launcher's side: wait for the old ranks (``wait_for_old_ranks``), then ``start`` a launch.

    The exclusive lock is held from the wait to ``start`` (or ``release``), so no old rank can come
    in between; the file is created only by ``start``: a refused launch leaves the run dir as it was."""

    def __init__(self, run_dir: Path, wait_s: float = OLD_RANKS_WAIT_S):
        self.run_dir = Path(run_dir)
        self.wait_s = wait_s
        self._fd: Optional[int] = None

    def wait_for_old_ranks(self, notice=None) -> None:
        """Hold the ranks' lock exclusively once no rank of an earlier launch holds it; ``OldRanksAlive`` after
        ``wait_s``. ``notice(text)`` is told once when there is something to wait for."""
        try:
            fd = os.open(ranks_lock_path(self.run_dir), os.O_RDWR)  # not inherited by children (PEP 446)
        except FileNotFoundError:
            return  # no launch of this version ever started ranks here
        self._fd = fd
        if _flock_within(fd, fcntl.LOCK_EX, 0):
            return
        if notice is not None:
            ranks = ", ".join(live_ranks(os.pread(fd, 65536, 0).decode(errors="replace"))) or "ranks"
            notice(f"waiting up to {self.wait_s:g}s for {ranks} of the previous launch to exit")
        if not _flock_within(fd, fcntl.LOCK_EX, self.wait_s):
            error = _refusal(self.run_dir, fd, self.wait_s)
            self.release()
            raise error

    def start(self) -> str:
        """Write a new launch id into the lock file (creating it) and let the new ranks in; the id."""
        if self._fd is None:  # no lock file when the wait began; a rank may open it once made, never make it
            self._fd = os.open(ranks_lock_path(self.run_dir), os.O_RDWR | os.O_CREAT, 0o644)
            if not _flock_within(self._fd, fcntl.LOCK_EX, RANK_WAIT_S):  # such a rank lets go at once (no id)
                error = _refusal(self.run_dir, self._fd, RANK_WAIT_S)
                self.release()
                raise error
        launch = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{os.urandom(3).hex()}"
        record = f"{_LAUNCH}{launch} by pid {os.getpid()} on host {socket.gethostname()}\n".encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, record, 0)
        self.release()
        return launch

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the only descriptor: the exclusive lock ends
            self._fd = None


def hold_for_rank(run_dir: Path, launch: str, rank: int) -> Optional[int]:
    """In a rank's wrapper: hold the ranks' lock shared and sign in; the descriptor (keep it open for as long
    as the rank runs), or None where the run dir has no lock file (a host that does not share it).

    Raises ``StaleLaunch`` when the run dir now belongs to another launch (this rank must not start)."""
    try:
        fd = os.open(ranks_lock_path(run_dir), os.O_RDWR | os.O_APPEND)  # not inherited by children (PEP 446)
    except FileNotFoundError:
        return None
    held = _flock_within(fd, fcntl.LOCK_SH, RANK_WAIT_S)
    now = current_launch(run_dir)
    if not held or now != launch:
        os.close(fd)
        why = f"now belongs to launch {now}" if held else f"was being taken by a new launch for {RANK_WAIT_S:g}s"
        raise StaleLaunch(f"rank {rank} of launch {launch} does not start: run dir {run_dir} {why}")
    os.write(fd, f"{_RANK}{rank}: pid {os.getpid()} on host {socket.gethostname()}\n".encode())
    return fd
