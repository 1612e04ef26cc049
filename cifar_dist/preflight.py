"""Is the run dir writable? Checked before anything starts, as one line and exit 2.

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
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from cifar_dist.errors import CifarDistError

# Folders the job writes into, inside the run dir (trainer, launchers).
OUTPUT_SUBDIRS = ("checkpoints", "saved_models", "logs")
FIX = "choose a writable folder with hydra.run.dir=... (hydra.sweep.dir=... for -m) or fix its permissions"


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


def _exit_with(error: RunDirError) -> None:
    print(f"cifar_dist: error: {error}", file=sys.stderr, flush=True)
    sys.exit(2)  # SystemExit passes through Hydra's error reporting: no traceback


class RunDirCheck(Callback):
    """Hydra callback: probe the run (or sweep) dir before Hydra creates it."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        try:
            check_future_dir(Path(str(config.hydra.run.dir)), "run dir")
        except RunDirError as error:
            _exit_with(error)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        try:
            check_future_dir(Path(str(config.hydra.sweep.dir)), "sweep dir")
        except RunDirError as error:
            _exit_with(error)
