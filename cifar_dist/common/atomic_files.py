"""Writing files so that a crash never leaves half of one: the one home of atomic writes.

Every file cifar_dist writes whole (checkpoints and the saved model through
``atomic_path``; metrics.json, evaluation.json, the CSV logs, exit records,
the run file through ``atomic_write_text``/``write_json``; the plots through
``save_figure``; a downloaded archive; the launchers' job files (job.sbatch,
job.yml, job.json, the Slurm job id) and the files they download from a job's
outputs) goes to a temp file beside its target, is fsynced, and is
renamed over the target, with the rename made durable (``fsync_dir``). A
folder built whole under a hash of its content (the Azure launchers' wheel and
code snapshot) is staged beside its target and renamed into place by
``publish_dir``. Readers never see half a file; a kill leaves at worst a
``.<name>.<random>.cifar_dist.partial`` that ``remove_partials`` deletes;
a full disk becomes one DiskFullError line instead of a traceback.

Light on purpose (no TensorFlow, no matplotlib at import): the rank wrapper
and the launching process use it too.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List

from cifar_dist.common.errors import CifarDistError

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# Temp files of atomic_path: ``.<target name>.<mkstemp's 8 random chars>.cifar_dist.partial``.
# The suffix marks them as this program's own: remove_partials() deletes
# nothing else (a user's ``.notes.partial`` beside the outputs stays).
TEMP_SUFFIX = ".cifar_dist.partial"
_TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}" + re.escape(TEMP_SUFFIX) + "$")


class DiskFullError(CifarDistError, OSError):
    """No space (or quota) left while saving; the files written before are intact."""


def fsync_dir(path: Path) -> None:
    """Flush ``path``'s directory entries, so a file or folder just renamed into it stays there after power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _model_suffix_in(path: Path) -> str:
    """The model format a path being written names (``.h5``: Keras 2, ``.keras``: Keras 3, also inside a temp
    name), so the hint names the files that are there; both when the path names neither."""
    found = re.search(r"\.(h5|keras)(?![A-Za-z0-9])", Path(path).name)
    return found.group(0) if found else ".h5 (.keras)"


def disk_full(exc: BaseException, path: Path) -> DiskFullError | None:
    """A one-line DiskFullError for ``exc`` when it is ENOSPC/EDQUOT (h5py's OSErrors carry the errno too)."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return DiskFullError(
            f"no space left on the device writing {path} (files saved before are intact); free space "
            f"(older checkpoints/checkpoint-NNN{_model_suffix_in(path)} can go: resume needs only the newest), "
            "then re-run with the same hydra.run.dir to resume"
        )
    return None


def publish(tmp, path: Path) -> None:
    """Rename a finished temp file over ``path``, durably, with the mode a plain open() would give it.

    mkstemp creates files 0600; a run dir on shared storage (a Batch AI file
    share, a team's NFS) must stay readable to others as the umask allows.
    """
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    os.replace(tmp, path)
    fsync_dir(path.parent)  # the new name survives a crash too


def publish_dir(staged: Path, target: Path) -> None:
    """Rename the finished folder ``staged`` to ``target`` (same file system), durably.

    For folders named by a hash of their content: when a concurrent builder of the
    same content got there first, its ``target`` stays and ``staged`` is left to
    the caller's temp dir.
    """
    try:
        os.replace(staged, target)
    except OSError:
        if not Path(target).is_dir():
            raise
    fsync_dir(Path(target).parent)


def replace_dir(staged: Path, target: Path) -> None:
    """Put the finished folder ``staged`` at ``target`` (same file system), durably, replacing a folder there only
    once the new one is in place: the old one is moved aside first and deleted last, so a crash at any point
    leaves a whole folder under ``target`` (the old or the new) or the old one aside (deleted by the next
    replacement), never half of one."""
    target = Path(target)
    aside = None
    if target.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
        os.rename(target, aside / target.name)
    os.rename(staged, target)
    fsync_dir(target.parent)
    for old in target.parent.glob(f".{target.name}.*.old"):  # this one's, and any a crash left aside before
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_path(path: Path) -> Iterator[str]:
    """A temp file beside ``path`` for the block to write; published over ``path`` only if the block succeeds.

    An exception in the block (a write error, or a check of what was written
    that failed) removes the temp file and leaves ``path`` as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        publish(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        full = disk_full(exc, path)
        if full:
            raise full from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file + rename: readers never see half a file."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def strict_json_value(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None, so that it is valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json_value(v) for v in value]
    return value


def write_json(path: Path, data: Dict[str, Any]) -> None:
    """Strict JSON (``allow_nan=False``; NaN and infinities become null), written atomically."""
    atomic_write_text(path, json.dumps(strict_json_value(data), indent=2, sort_keys=False, allow_nan=False) + "\n")


def new_figure(**figure_kwargs: Any):
    """A matplotlib ``Figure`` made without pyplot, as matplotlib advises where no window is shown: no global
    figure manager to close it in, and pyplot's import (0.1 s of a run's end) not paid."""
    from matplotlib.figure import Figure  # lazy: matplotlib

    return Figure(**figure_kwargs)


def save_figure(fig, path: Path, **savefig_kwargs: Any) -> None:
    """A figure (``new_figure``'s) saved as PNG through atomic_path (matplotlib's Agg renderer)."""
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, format="png", **{"dpi": 100, **savefig_kwargs})


def is_temp_name(name: str) -> bool:
    """Whether ``name`` has the form of atomic_path's temp files (what remove_partials deletes)."""
    return bool(_TEMP_NAME.match(name))


def remove_partials(*directories: Path) -> List[Path]:
    """Delete the temp files an atomic write left behind when its process was killed.

    Only names of exactly atomic_path's form are deleted: other files in the
    run dir are the user's. Called by rank 0 before it writes anything, and
    the run dir lock (cifar_dist/rundir/guard.py) keeps other runs out, so no live
    writer owns them.
    """
    removed = []
    for directory in directories:
        if not Path(directory).is_dir():
            continue
        for p in Path(directory).iterdir():
            if _TEMP_NAME.match(p.name) and p.is_file():
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed
