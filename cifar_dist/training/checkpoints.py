"""Per-epoch checkpoints: written atomically, found and verified on resume.

A checkpoint is a full Keras HDF5 model file (weights *and* optimizer state,
including the iteration count that drives the seed's lr decay), named
``checkpoint-NNN.h5`` after the number of epochs completed. It is written to
a temporary name in the same folder, flushed to disk and renamed, so a crash
(kill -9, disk full) leaves either the old set of checkpoints or the new one,
never a half-written file under a checkpoint's name. On resume the newest
checkpoint that actually loads wins; one that does not is reported and
skipped, never deleted.
"""
from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np

from cifar_dist.atomic_files import atomic_path

log = logging.getLogger(__name__)

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d{3,})\.h5$")


def checkpoint_path(directory: Path, epoch: int) -> Path:
    return directory / f"checkpoint-{epoch:03d}.h5"


def list_checkpoints(directory: Path) -> List[tuple]:
    """(epoch, path) of every checkpoint-named file, oldest first."""
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        m = CHECKPOINT_RE.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def atomic_save_model(model, path: Path, include_optimizer: bool) -> None:
    """model.save() through atomic_path: a temp file beside ``path``, fsynced, renamed over it."""
    with atomic_path(path) as tmp, warnings.catch_warnings():
        # HDF5 is what the seed saved and what Keras 2 users load; Keras's
        # "legacy format" notice would otherwise print every epoch.
        warnings.filterwarnings("ignore", message=".*HDF5 file via `model.save\\(\\)`.*")
        model.save(tmp, include_optimizer=include_optimizer, save_format="h5")


def read_optimizer_weights(path: Path) -> List[np.ndarray]:
    """The optimizer state a Keras 2 HDF5 model file holds, in the optimizer's own order."""
    import h5py

    with h5py.File(path, "r") as f:
        if "optimizer_weights" not in f:
            return []
        group = f["optimizer_weights"]
        names = [n.decode("utf8") if isinstance(n, bytes) else n for n in group.attrs["weight_names"]]
        return [np.asarray(group[n]) for n in names]


def restore(model, path: Path) -> None:
    """Load weights and optimizer state from ``path`` into a compiled ``model``."""
    model.load_weights(path)
    values = read_optimizer_weights(path)
    if values:
        opt = model.optimizer
        # Legacy Keras optimizers create their slots lazily; create them now
        # so that set_weights has somewhere to put the values.
        opt._create_all_weights(model.trainable_variables)
        opt.set_weights(values)


@dataclass
class Restored:
    epoch: int
    path: Optional[Path]
    skipped: List[str]


def restore_latest(model, directory: Path) -> Restored:
    """Restore the newest checkpoint that loads; report the ones that did not."""
    skipped = []
    for epoch, path in reversed(list_checkpoints(directory)):
        try:
            restore(model, path)
        except Exception as exc:  # a corrupt or foreign file: try the one before
            msg = f"{path.name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log.warning("checkpoint %s does not load, trying an older one", msg)
            skipped.append(msg)
            continue
        return Restored(epoch, path, skipped)
    return Restored(0, None, skipped)


def prune(directory: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints (keep <= 0: keep all)."""
    if keep <= 0:
        return
    for _, path in list_checkpoints(directory)[:-keep]:
        path.unlink(missing_ok=True)
