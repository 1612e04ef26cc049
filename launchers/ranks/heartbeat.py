"""Rank heartbeats: a frozen rank ends a multi-rank job instead of hanging it.

Horovod's stall check (``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS``) catches a rank
that is alive but does not reach a collective the others wait in. It cannot
catch a rank that is not running at all (SIGSTOP, a frozen VM, a process
stuck in the kernel): Horovod's coordination is itself a collective, so every
rank blocks in it and no stall is ever reported (measured: a SIGSTOPped rank
of a 2-rank job with a 20 s stall shutdown hung for as long as it was left).

So every rank touches ``<run dir>/logs/rank.N.alive`` from a daemon thread
every ``INTERVAL_S`` (``rank_exec`` names the file in ``CIFAR_DIST_HEARTBEAT``;
``app.main`` starts the thread), and the launcher's ``HeartbeatWatch`` stops
the job when a rank's file has not changed for the stall timeout. The thread
beats while the rank waits in a collective or loads data, so only a process
that is not scheduled at all goes quiet. A file is watched only once it has
changed during this launch (stale files from an earlier launch, or ranks on
hosts that do not share the run dir, never trigger it), and times are the
launcher's own clock, so clock skew between hosts does not matter.
Only the standard library: rank_exec imports this.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HEARTBEAT_ENV = "CIFAR_DIST_HEARTBEAT"
INTERVAL_S = 2.0
# launcher.stall_shutdown_s: a rank beats every INTERVAL_S; a timeout shorter than a few beats would stop healthy
# jobs.
MIN_STALL_SHUTDOWN_S = 10


def heartbeat_path(log_dir: Path, rank: int) -> Path:
    return Path(log_dir) / f"rank.{rank}.alive"


def _touch(path: str) -> None:
    try:
        with open(path, "a"):
            pass
        os.utime(path)
    except OSError:
        pass  # a full or vanished log dir must not kill the rank


def stall_timeout_problems(stall_shutdown_s) -> List[str]:
    """``launcher.stall_shutdown_s`` of a launcher whose ranks beat (mpirun, Gloo, Slurm): 0 (off) or long
    enough for a few beats; one phrase, checked with the launcher's other settings (``config_problems``)."""
    if stall_shutdown_s is not None and stall_shutdown_s != 0 and not stall_shutdown_s >= MIN_STALL_SHUTDOWN_S:
        return [
            f"launcher.stall_shutdown_s={stall_shutdown_s} must be 0 (off) or >= {MIN_STALL_SHUTDOWN_S}: "
            "ranks beat every 2 s, a shorter timeout stops healthy jobs"
        ]
    return []


def start_from_env(environ=None, interval: float = INTERVAL_S) -> Optional[threading.Thread]:
    """In a rank a launcher started: beat on the file it named (no-op otherwise)."""
    environ = os.environ if environ is None else environ
    path = environ.get(HEARTBEAT_ENV)
    if not path:
        return None

    def beat() -> None:
        while True:
            _touch(path)
            time.sleep(interval)

    thread = threading.Thread(target=beat, name="cifar_dist-heartbeat", daemon=True)
    thread.start()
    return thread


class HeartbeatWatch:
    """Called about twice a second by the supervisor: a reason to stop, or ''."""

    def __init__(self, log_dir: Path, np: int, timeout_s: float, clock=time.monotonic):
        self.log_dir = Path(log_dir)
        self.np = int(np)
        self.timeout_s = float(timeout_s)
        self.clock = clock
        self._seen: Dict[int, Tuple[Optional[int], float, bool]] = {}  # rank -> (mtime_ns, last change, armed)
        self.stalled_rank: Optional[int] = None

    def _mtime(self, rank: int) -> Optional[int]:
        try:
            return heartbeat_path(self.log_dir, rank).stat().st_mtime_ns
        except OSError:
            return None

    def __call__(self) -> str:
        if self.timeout_s <= 0:
            return ""
        now = self.clock()
        for rank in range(self.np):
            mtime = self._mtime(rank)
            if rank not in self._seen:
                self._seen[rank] = (mtime, now, False)
                continue
            last, changed_at, armed = self._seen[rank]
            if mtime != last:
                self._seen[rank] = (mtime, now, armed or mtime is not None)
            elif armed and now - changed_at > self.timeout_s:
                self.stalled_rank = rank
                return (
                    f"rank {rank} stopped responding (no heartbeat for {now - changed_at:.0f}s: "
                    "stopped, frozen or its host gone)"
                )
        return ""
