"""Hydra callback: lock the run dir and check a re-run, before Hydra writes anything into it.

Hydra writes ``.hydra/config.yaml``/``overrides.yaml`` and opens the job log
before the task function runs, so a run that is refused in ``app.main`` has
already overwritten the description of the run whose files are there. This
callback runs earlier, in ``on_run_start`` (``conf/hydra/default.yaml``), in
the process that launches the job (ranks are its children and share the dir:
they skip it). It takes the run dir's lock (``lock.py``), waits (bounded) for
the ranks of the previous launch to exit (``ranks_lock.py``: they outlive a
launcher killed with -9 by seconds), and applies the resume policy
(``resume_policy.py``); any of these failing is one line and exit 2, with
nothing in the run dir touched. Once all pass, it starts a new launch: the id
its ranks and their exit records carry (``ranks_lock.LaunchStart.start``).
The lock is held until the run ends (``on_run_end``, or the process's exit). Before all that, a folder that
cifar_dist did not make is refused (``owner.py``), and once the checks
pass the run dir gets cifar_dist's marker.

A cluster job holds the lock itself while it runs (its batch script takes
it, ``lock.py``). A launch of that job's launcher into its run dir may
follow it: the configured launcher's ``follows_job_in`` says whether the
holder is the job this launch follows (then it goes on without the lock) and
refuses one that would follow it with other settings; everyone else is
refused naming the holder (job id, host, pid).

In a sweep (``-m``) cifar_dist's sweep launcher (``launchers/sweep_launcher.py``)
guards every point's dir with ``guard_run_dir`` before the first point
starts and before Hydra writes that point's ``.hydra/``: a point that would
resume with other settings, follow another job or take over a folder of the
user's own files is refused like a single run. The locks are held until the
batch has ended, so points a concurrent launcher runs later stay locked too.
With another Hydra launcher, the points are guarded when their job starts
(``on_job_start``), after Hydra has written their ``.hydra/``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, Optional

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import OmegaConf

from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.hydra_hooks import fails_closed
from cifar_dist.common.process_role import in_child_process
from cifar_dist.config.launcher_object import launcher_class
from cifar_dist.config.plugin_names import SWEEP_LAUNCHER_CLASS
from cifar_dist.rundir.lock import RunDirInUse, RunDirLock
from cifar_dist.rundir.owner import claim, existing_ancestor, owner, refuse_foreign
from cifar_dist.rundir.ranks_lock import LaunchStart
from cifar_dist.rundir.resume_policy import check_rerun, record_start


def _exit_with(error: CifarDistError) -> None:
    print(f"cifar_dist: error: {error}", file=sys.stderr, flush=True)
    sys.exit(2)  # SystemExit passes through Hydra's error reporting: no traceback


def _notice(text: str) -> None:
    print(f"cifar_dist: {text}", file=sys.stderr, flush=True)


def _launcher_follows_job(config: Any, run_dir: Path, holder: Optional[str]) -> bool:
    """Whether the configured launcher (``launcher._target_``) follows the job holding ``run_dir``:
    its class's ``follows_job_in`` (Slurm's); a launcher without one, or a bad target, never follows."""
    cls = launcher_class(OmegaConf.select(config, "launcher._target_", default=None))
    follows = getattr(cls, "follows_job_in", None)
    return bool(follows(run_dir, config, holder)) if callable(follows) else False


def guard_run_dir(run_dir: Path, config: Any) -> Optional[RunDirLock]:
    """Check ``run_dir`` for a job of ``config`` and lock it; None when the launch follows the job holding it.

    Raises a ``CifarDistError`` (nothing in the run dir touched) for a foreign folder, a live holder, ranks of
    an earlier launch still alive after the wait, or a re-run that would not continue the run dir's experiment
    unchanged."""
    existed, was = existing_ancestor(run_dir), owner(run_dir)
    lock, launch = RunDirLock(run_dir), LaunchStart(run_dir)
    try:
        refuse_foreign(run_dir)
        busy = None
        try:
            lock.acquire()
        except RunDirInUse as in_use:
            busy = in_use
        if _launcher_follows_job(config, run_dir, busy.holder if busy else None):
            return None  # the job holds its run dir; this process only follows it
        if busy is not None:
            raise busy
        launch.wait_for_old_ranks(notice=_notice)  # before anything reads what they may still write
        check_rerun(run_dir, config)
        kept = claim(run_dir, was, existed)
        record_start(run_dir, config)
        launch.start()
    except CifarDistError:
        lock.release()
        raise
    finally:
        launch.release()
    if kept:
        print(
            f"cifar_dist: adopted {run_dir}; kept your files as " + ", ".join(p.name for p in kept),
            file=sys.stderr,
            flush=True,
        )
    return lock


def guarded_by_sweep_launcher(config: Any) -> bool:
    """Whether the sweep's launcher is cifar_dist's, which guards every point before Hydra writes into it."""
    return OmegaConf.select(config, "hydra.launcher._target_", default=None) == SWEEP_LAUNCHER_CLASS


class RunDirGuard(Callback):
    """Holds the lock of every run dir this process launches into; see the module doc."""

    def __init__(self) -> None:
        self._locks: Dict[Path, Optional[RunDirLock]] = {}

    def guard(self, run_dir: Path, config: Any) -> None:
        """Guard ``run_dir`` (``guard_run_dir``) once per process, keeping its lock; raises a ``CifarDistError``."""
        if in_child_process() or run_dir in self._locks:
            return
        self._locks[run_dir] = guard_run_dir(run_dir, config)

    def _guard(self, run_dir: Path, config: Any) -> None:
        try:
            self.guard(run_dir, config)
        except CifarDistError as error:
            _exit_with(error)

    def release_all(self) -> None:
        for lock in self._locks.values():
            if lock is not None:
                lock.release()
        self._locks.clear()

    @fails_closed
    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        self._guard(Path(str(config.hydra.run.dir)).absolute(), config)

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        self.release_all()

    @fails_closed
    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        if config.hydra.mode == RunMode.MULTIRUN and not guarded_by_sweep_launcher(config):
            self._guard(Path(str(config.hydra.runtime.output_dir)).absolute(), config)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        self.release_all()
