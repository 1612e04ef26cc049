"""Files the trainer leaves in the run dir besides checkpoints: metrics.json and the plot."""
from __future__ import annotations

import errno
import json
import math
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List

from cifar_dist.durable import fsync_dir
from cifar_dist.errors import CifarDistError

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# Temp files of atomic_path: ``.<target name>.<mkstemp's 8 random chars>.cifar_dist.partial``.
# The suffix marks them as this program's own: remove_partials() deletes
# nothing else (a user's ``.notes.partial`` beside the outputs stays).
TEMP_SUFFIX = ".cifar_dist.partial"
_TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}" + re.escape(TEMP_SUFFIX) + "$")


class DiskFullError(CifarDistError, OSError):
    """No space (or quota) left while saving; the files written before are intact."""


def disk_full(exc: BaseException, path: Path) -> "DiskFullError | None":
    """A one-line DiskFullError for ``exc`` when it is ENOSPC/EDQUOT (h5py's OSErrors carry the errno too)."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return DiskFullError(
            f"no space left on the device writing {path} (files saved before are intact); free space "
            "(older checkpoints/checkpoint-NNN.h5 can go: resume needs only the newest), "
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


@contextmanager
def atomic_path(path: Path) -> Iterator[str]:
    """A temp file beside ``path`` for the block to write; published over ``path`` only if the block succeeds.

    Every artifact (checkpoints, the saved model, metrics.json, the CSV log,
    the plots) is written through here: readers never see half a file, a
    kill leaves at worst a ``.<name>.<random>.cifar_dist.partial`` that
    remove_partials() deletes, the rename is durable (publish), and a full
    disk becomes one DiskFullError line instead of a traceback.
    """
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
        with open(tmp, "w") as f:
            f.write(text)


def is_temp_name(name: str) -> bool:
    """Whether ``name`` has the form of atomic_path's temp files (what remove_partials deletes)."""
    return bool(_TEMP_NAME.match(name))


def remove_partials(*directories: Path) -> List[Path]:
    """Delete the temp files an atomic write left behind when its process was killed.

    Every writer here (checkpoints, the saved model, metrics.json, the CSV
    log, the plots) writes through atomic_path, whose temp files carry
    TEMP_SUFFIX; a kill -9 in between leaves the temp file, never a
    half-written target. Only names of exactly that form are deleted: other
    files in the run dir are the user's. Called by rank 0 before it writes
    anything, and the run dir lock (cifar_dist/rundir.py) keeps other runs
    out, so no live writer owns them.
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


def trim_csv_log(path: Path, epochs_done: int) -> None:
    """Keep the rows of the CSV log (1-based ``epoch``) for the first ``epochs_done`` epochs only.

    A run killed after logging an epoch but before checkpointing it redoes
    that epoch on resume; without this its row would appear twice. A log of
    an earlier version (Keras' 0-based numbering, first row ``0``) is
    renumbered, so the rows the resumed run appends continue it.
    """
    import csv
    import io

    if not path.is_file():
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or "epoch" not in rows[0]:
        return
    col = rows[0].index("epoch")
    data = [r for r in rows[1:] if len(r) > col and r[col].isdigit()]
    shift = 1 if data and data[0][col] == "0" else 0
    kept = [rows[0]] + [r[:col] + [str(int(r[col]) + shift)] + r[col + 1:] for r in data
                        if int(r[col]) + shift <= epochs_done]
    if kept == rows:
        return
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(kept)
    atomic_write_text(path, out.getvalue())


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


def read_json(path: Path) -> Dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def read_metrics_to_resume(path: Path) -> Dict[str, Any]:
    """metrics.json of the run being resumed; {} when it is missing or damaged.

    A damaged record must not block a resume whose checkpoint loads (a
    damaged checkpoint is skipped too): it is copied to
    ``<name>.damaged`` for the user, reported, and a new record starts
    (the per-epoch numbers are also in training_log.csv).
    """
    import logging
    import shutil

    if not path.is_file():
        return {}
    try:
        metrics = read_json(path)
        epochs = metrics.get("epochs", []) if isinstance(metrics, dict) else None
        if not isinstance(epochs, list) or not all(isinstance(e, dict) and isinstance(e.get("epoch"), int) for e in epochs):
            raise ValueError("not a cifar_dist metrics record")
        return metrics
    except (OSError, ValueError) as exc:
        kept = path.with_name(path.name + ".damaged")
        shutil.copyfile(path, kept)
        logging.getLogger(__name__).warning(
            "%s is damaged (%s); kept as %s, starting a new record", path, str(exc).splitlines()[0], kept.name)
        return {}


def plot_learning_curves(epochs: List[Dict[str, Any]], path: Path, title: str = "") -> None:
    """Loss and accuracy per epoch, train and validation, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    xs = [e["epoch"] for e in epochs]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "loss", "loss"), (axes[1], "accuracy", "accuracy")):
        for prefix, style in (("", "-"), ("val_", "--")):
            ys = [e.get(prefix + key) for e in epochs]
            if any(v is not None for v in ys):
                ax.plot(xs, ys, style, marker="o", markersize=3, label=("validation " if prefix else "train ") + label)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs, never 1.5
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(fig)
