"""Can this run start? Checked before anything starts, as one line and exit 2.

``RunDirCheck`` first checks the config's values (``validation.py``, the
launcher's settings included), before Hydra creates the run dir: a refused
command leaves nothing under ``outputs/``. It is the launching process's one
validation: the config passed on is marked validated, and the app and the
trainer trust it. A resume's checkpoints must have been written on this stack
(``stack.py``). Then: is the run dir writable, with room left on its disk?

Without this a run dir under a file, on a read-only mount or without write
permission fails with Hydra's traceback (it creates the dir before the job
starts), and a ``checkpoints/`` that cannot be written fails only after the
first epoch has been trained. Two places check:

* ``RunDirCheck``, a Hydra callback (``conf/hydra/default.yaml``), before
  Hydra creates ``hydra.run.dir`` (or ``hydra.sweep.dir`` of a sweep): it
  creates nothing, only probes the dir or its nearest existing parent;
* ``check_run_dir`` in ``app.main`` once the dir exists: the dir itself and
  the output folders in it that already exist.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.hydra_hooks import fails_closed
from cifar_dist.common.process_role import in_child_process
from cifar_dist.config.validation import validate
from cifar_dist.rundir.owner import Owner, owner, refuse_foreign_sweep_dir
from cifar_dist.rundir.stack import check_stack

# Folders the job writes into, inside the run dir (trainer, launchers).
OUTPUT_SUBDIRS = ("checkpoints", "saved_models", "logs")
FIX = "choose a writable folder with hydra.run.dir=... (hydra.sweep.dir=... for -m) or fix its permissions"
# Hydra writes .hydra/ and the log before the job can report anything: below
# this much free space that fails with a traceback, so it is refused first.
MIN_FREE_BYTES = 1 << 20


class RunDirError(CifarDistError, OSError):
    """The run dir (or a folder in it) cannot be written; one line that says what to do."""


def _probe(directory: Path, what: str) -> None:
    """Create and delete a temp file in ``directory`` (permissions, read-only mounts, ENOSPC on create)."""
    if not directory.is_dir():
        raise RunDirError(f"{what} {directory} is not a directory; {FIX}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".write-check.", suffix=".partial", dir=directory)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise RunDirError(f"cannot write to {what} {directory} ({exc.strerror or exc}); {FIX}") from None
    disk = os.statvfs(directory)
    if disk.f_bavail * disk.f_frsize < MIN_FREE_BYTES:
        raise RunDirError(
            f"no space left on the device of {what} {directory} "
            f"({disk.f_bavail * disk.f_frsize} bytes free); free some space or choose another "
            "hydra.run.dir (hydra.sweep.dir for -m)"
        )


def check_future_dir(directory: Path, what: str = "run dir") -> None:
    """``directory`` exists and is writable, or its nearest existing parent is (nothing is created)."""
    directory = Path(directory).absolute()
    probe = directory
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if probe != directory and not probe.is_dir():
        raise RunDirError(f"cannot create {what} {directory}: {probe} is not a directory; {FIX}")
    _probe(probe, what if probe == directory else f"{what}'s parent")


def check_run_dir(output_dir: Path) -> None:
    """The run dir and every output folder already in it can be written."""
    output_dir = Path(output_dir)
    _probe(output_dir, "run dir")
    for name in OUTPUT_SUBDIRS:
        sub = output_dir / name
        if sub.exists() or sub.is_symlink():
            _probe(sub, "output folder")


def _exit_with(error: CifarDistError) -> None:
    print(f"cifar_dist: error: {error}", file=sys.stderr, flush=True)
    sys.exit(2)  # SystemExit passes through Hydra's error reporting: no traceback


def check_values(config: Any) -> None:
    """The job's config values and launcher settings (not Hydra's own node), every problem in one line."""
    if not in_child_process():  # a rank: its launcher checked everything before starting it
        validate(config)


def note_in_log(run_dir: Path, job_name: str, message: str) -> None:
    """Append why a command was refused to the job log of an existing cifar_dist run dir (Hydra's log format)."""
    if owner(run_dir) not in (Owner.OURS, Owner.LEGACY):
        return  # no run dir yet (nothing is created for a refusal), or not ours to write into
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        with open(run_dir / f"{job_name}.log", "a", encoding="utf-8") as f:
            f.write(f"[{stamp},000][cifar_dist.app][ERROR] - refused: {message}\n")
    except OSError:
        pass  # the terminal has the line; an unwritable log must not hide it


class RunDirCheck(Callback):
    """Hydra callback: check the values, then probe the run (or sweep) dir, before Hydra creates it."""

    @fails_closed
    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        run_dir = Path(str(config.hydra.run.dir)).absolute()
        try:
            check_values(config)
            check_stack(run_dir, config)  # before engine=auto keeps the engine of a resume's checkpoints
        except CifarDistError as error:
            note_in_log(run_dir, str(config.hydra.job.name), str(error))
            _exit_with(error)
        try:
            check_future_dir(run_dir, "run dir")
            if run_dir.is_dir():
                check_run_dir(run_dir)
        except CifarDistError as error:
            _exit_with(error)

    @fails_closed
    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
        try:
            check_future_dir(sweep_dir, "sweep dir")
            refuse_foreign_sweep_dir(sweep_dir)
        except CifarDistError as error:
            _exit_with(error)
