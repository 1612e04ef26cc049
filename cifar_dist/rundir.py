"""Hydra callback: lock the run dir and check a re-run, before Hydra writes anything into it.

Hydra writes ``.hydra/config.yaml``/``overrides.yaml`` and opens the job log
before the task function runs, so a run that is refused in ``app.main`` has
already overwritten the description of the run whose files are there. This
callback runs earlier, in ``on_run_start`` (``conf/hydra/default.yaml``), in
the process that launches the job (ranks are its children and share the dir:
they skip it). It takes the run dir's lock (``rundir_lock.py``) and applies
the resume policy (``resume_policy.py``); either failing is one line and
exit 2, with nothing in the run dir touched. The lock is held until the run
ends (``on_run_end``, or the process's exit). Before all that, a folder that
cifar_dist did not make is refused (``rundir_owner.py``), and once the checks
pass the run dir gets cifar_dist's marker.

In a sweep (``-m``) every point's dir is locked and checked when its job
starts (``on_job_start``: Hydra has written that point's ``.hydra/`` by then)
and the locks are held until the whole sweep has ended, so points a
concurrent launcher runs later stay locked too.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict

from hydra.experimental.callback import Callback

from cifar_dist.errors import CifarDistError
from cifar_dist.rundir_lock import RunDirLock
from cifar_dist.rundir_owner import claim, existing_ancestor, owner, refuse_foreign


def _exit_with(error: CifarDistError) -> None:
    print(f"cifar_dist: error: {error}", file=sys.stderr, flush=True)
    sys.exit(2)  # SystemExit passes through Hydra's error reporting: no traceback


class RunDirGuard(Callback):
    """Holds the lock of every run dir this process launches into; see the module doc."""

    def __init__(self) -> None:
        self._locks: Dict[Path, RunDirLock] = {}

    def _guard(self, run_dir: Path, config: Any) -> None:
        from cifar_dist.launchers.base import in_child_process
        from cifar_dist.resume_policy import check_rerun

        if in_child_process() or run_dir in self._locks:
            return
        existed, was = existing_ancestor(run_dir), owner(run_dir)
        lock = RunDirLock(run_dir)
        try:
            refuse_foreign(run_dir)
            lock.acquire()
            check_rerun(run_dir, config)
            kept = claim(run_dir, was, existed)
        except CifarDistError as error:
            lock.release()
            _exit_with(error)
        if kept:
            print(f"cifar_dist: adopted {run_dir}; kept your files as " + ", ".join(p.name for p in kept),
                  file=sys.stderr, flush=True)
        self._locks[run_dir] = lock

    def _release_all(self) -> None:
        for lock in self._locks.values():
            lock.release()
        self._locks.clear()

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        self._guard(Path(str(config.hydra.run.dir)).absolute(), config)

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        self._release_all()

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        from hydra.types import RunMode

        if config.hydra.mode == RunMode.MULTIRUN:
            self._guard(Path(str(config.hydra.runtime.output_dir)).absolute(), config)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        self._release_all()
