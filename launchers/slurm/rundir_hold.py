"""The batch script's hold on its run dir: ``python -m cifar_dist.launchers.slurm.rundir_hold``.

The batch script opens ``<run dir>/.cifar_dist.lock`` on descriptor 9 for its
whole life and runs this on it (``script.py``); the lock belongs to that open
file, so it stays held after this process exits, until the job ends
(``cifar_dist/rundir/lock.py``). Exit status:

* 0: locked; the record names the job, its batch script's pid and host;
* 3: the launcher that submitted (or follows) this job holds it: its record
  says so. The script then runs this again with ``--wait`` in the
  background, which takes the lock the moment that launcher lets go
  (Ctrl-C with ``on_interrupt=detach``, ``kill -9``, ...), so the run dir is
  never without a holder while the job runs;
* 2: anything else holds it (a local run, another job): one line naming it on
  stderr, and the job ends there, before any rank has touched the run dir.
"""

from __future__ import annotations

import argparse
import fcntl
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from cifar_dist.rundir.lock import RunDirInUse, lock_fd, write_holder

LAUNCHER_NOTE = ", the Slurm launcher of this run dir"
HELD_BY_LAUNCHER = 3


def launcher_note(job_id: Optional[str] = None) -> str:
    """What the launcher adds to its lock record (``note_holder``) before and after it submits."""
    return LAUNCHER_NOTE + (f", following Slurm job {job_id}" if job_id else "")


def held_for(holder: str, job_id: str) -> bool:
    """Whether a lock record is the Slurm launcher of this run dir, submitting or following ``job_id``."""
    match = re.search(re.escape(LAUNCHER_NOTE) + r"(?:, following Slurm job (\S+))?$", holder)
    return bool(match) and match.group(1) in (None, job_id)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="the batch script's open lock file")
    parser.add_argument("--job", required=True, help="the job's id (12, or 12_3 for an array task)")
    parser.add_argument("--wait", action="store_true", help="block until the lock is free, then take it")
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args(argv)
    job = f"Slurm job {args.job}"
    if args.wait:
        fcntl.flock(args.fd, fcntl.LOCK_EX)
        write_holder(args.fd, job)
        return 0
    try:
        lock_fd(args.fd, args.run_dir, job)
    except RunDirInUse as busy:
        if held_for(busy.holder, args.job):
            return HELD_BY_LAUNCHER
        print(f"cifar_dist: error: {busy}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
