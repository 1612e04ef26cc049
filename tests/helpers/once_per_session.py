"""A session fixture's work done once for the whole test session, also when pytest-xdist splits the session over
workers (each worker is a process with its own session fixtures).

pytest-xdist's documented pattern ("Making session-scoped fixtures execute only once"): the first worker to get the
file lock builds into the directory that every worker's temp dirs share (``getbasetemp().parent``); the others wait
on the lock, then read what it left. Without xdist it is a plain temp dir.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable

BUILT = ".built"  # written last: a worker that failed half-way leaves no marker, and the next one builds again


def build_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """``build(folder)`` once per session; returns the folder it built (read it; copy it before changing it)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    folder = tmp_path_factory.getbasetemp().parent / name
    with open(folder.with_name(f"{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the worker dies)
        if not (folder / BUILT).is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / BUILT).touch()
    return folder
