"""Per-epoch checkpoints: written atomically, found and verified on resume.

A checkpoint is a full Keras model file (weights *and* optimizer state,
including the iteration count that drives the seed's lr decay), named
``checkpoint-NNN.h5`` after the number of epochs completed: HDF5 for a Keras 2
(tf.keras) model, as the seed saved; Keras 3's own zip format,
``checkpoint-NNN.keras``, for a Keras 3 model. It is written to
a temporary name in the same folder, flushed to disk and renamed, so a crash
(kill -9, disk full) leaves either the old set of checkpoints or the new one,
never a half-written file under a checkpoint's name. On resume the newest
checkpoint that actually loads wins; one that does not is reported and
skipped, never deleted.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np

from cifar_dist.common.atomic_files import atomic_path
from cifar_dist.common.keras_flavor import KERAS3, flavor_of
from cifar_dist.common.keras_internals import create_legacy_optimizer_slots, save_model_to_file

log = logging.getLogger(__name__)

SAVED_MODEL_NAME = "keras_cifar10_trained_model"  # the seed's file name, less its suffix
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d{3,})\.(h5|keras)$")


def model_suffix(model) -> str:
    """The file suffix a model of this Keras is saved with: ".h5" (Keras 2) or ".keras" (Keras 3)."""
    return ".keras" if flavor_of(model) == KERAS3 else ".h5"


def checkpoint_path(directory: Path, epoch: int, suffix: str = ".h5") -> Path:
    return directory / f"checkpoint-{epoch:03d}{suffix}"


def saved_model_path(run_dir: Path, suffix: str = ".h5") -> Path:
    """Where a run dir's final model is saved: ``saved_models/keras_cifar10_trained_model.h5`` (.keras: Keras 3)."""
    return Path(run_dir) / "saved_models" / f"{SAVED_MODEL_NAME}{suffix}"


def find_saved_model(run_dir: Path) -> Optional[Path]:
    """The run dir's final model of either Keras, or None."""
    for suffix in (".h5", ".keras"):
        if saved_model_path(run_dir, suffix).is_file():
            return saved_model_path(run_dir, suffix)
    return None


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
    if flavor_of(model) == KERAS3:
        _save_keras3(model, path)
        return
    with atomic_path(path) as tmp, warnings.catch_warnings():
        # HDF5 is what the seed saved and what Keras 2 users load; Keras's
        # "legacy format" notice would otherwise print every epoch.
        warnings.filterwarnings("ignore", message=".*HDF5 file via `model.save\\(\\)`.*")
        model.save(tmp, include_optimizer=include_optimizer, save_format="h5")


def _save_keras3(model, path: Path) -> None:
    """A Keras 3 model in its .keras zip, written through atomic_path.

    Keras 3's ``model.save`` insists on a name ending in ".keras", which the
    temp file's is not; its saving library writes to an open file as well.
    Keras 3 has no include_optimizer: a compiled model's file holds its
    optimizer state (a few MB more for the final model; loading with
    compile=False ignores it)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f, _undistributed():
        save_model_to_file(model, f)


@contextlib.contextmanager
def _undistributed():
    """No Keras distribution while rank 0 saves alone (engine=jax).

    Keras' saving builds reference objects (an ``Optimizer(1.0)``) whose
    variables, under a distribution, would be created job-wide, a collective
    the other processes never join. The model's own variables are read from
    this process's replica, which needs no distribution either."""
    import keras  # lazy: Keras 3

    current = keras.distribution.distribution()
    if current is None:
        yield
        return
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(current)


def read_optimizer_weights(path: Path) -> List[np.ndarray]:
    """The optimizer state a Keras 2 HDF5 model file holds, in the optimizer's own order."""
    import h5py  # lazy: h5py

    with h5py.File(path, "r") as f:
        if "optimizer_weights" not in f:
            return []
        group = f["optimizer_weights"]
        names = [n.decode("utf8") if isinstance(n, bytes) else n for n in group.attrs["weight_names"]]
        return [np.asarray(group[n]) for n in names]


def restore(model, path: Path) -> None:
    """Load weights and optimizer state from ``path`` into a compiled ``model`` (its optimizer built)."""
    if path.suffix != model_suffix(model):
        raise ValueError(
            f"a {model_suffix(model)} model cannot load a {path.suffix} checkpoint (it was written by the other Keras)"
        )
    model.load_weights(path)
    if path.suffix == ".keras":  # Keras 3 loads the optimizer's state with the model's
        return
    values = read_optimizer_weights(path)
    if values:
        opt = model.optimizer
        # Legacy Keras optimizers create their slots lazily; create them now
        # so that set_weights has somewhere to put the values.
        create_legacy_optimizer_slots(opt, model.trainable_variables)
        opt.set_weights(values)


@dataclass
class Restored:
    epoch: int
    path: Optional[Path]
    skipped: List[str]


def restore_latest(model, directory: Path, listed: Optional[List[tuple]] = None, fetch=None) -> Restored:
    """Restore the newest checkpoint that loads; report the ones that did not.

    ``listed``: the (epoch, path) candidates (default: ``list_checkpoints(directory)``); ``fetch(path)``: the local
    file to load for a candidate (default: itself). The JAX engine passes both from rank 0, so that every process
    loads the same bytes."""
    skipped = []
    for epoch, path in reversed(list_checkpoints(directory) if listed is None else listed):
        try:
            restore(model, fetch(path) if fetch else path)
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
