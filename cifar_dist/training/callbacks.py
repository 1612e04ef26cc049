"""Keras callbacks of the training loop (besides Horovod's own).

Order matters and is set in trainer.py: the engine's metric averaging comes
first so that everything after it sees averaged metrics;
the writers below run on rank 0 only.

They subclass ``common/keras_callback.Callback``, which both Keras' ``fit`` (and the
JAX engine's loop) call, and import neither TensorFlow nor Keras: a run on
JAX needs no TensorFlow. They touch only what both Keras' models have.
"""

from __future__ import annotations

import csv
import hashlib
import math
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from cifar_dist.common.atomic_files import write_json
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.keras_callback import Callback
from cifar_dist.common.keras_flavor import KERAS3, flavor_of
from cifar_dist.common.keras_internals import nested_layers, seed_generators, tf_random_generators
from cifar_dist.common.keras_ops import current_lr
from cifar_dist.rundir import checkpoints


class EpochCSVLogger(Callback):
    """One row per epoch in ``training_log.csv``, epochs numbered as Keras prints them ("Epoch 1/3"), as in
    metrics.json and the checkpoint names (``checkpoint-001.h5`` holds epoch 1); Keras' CSVLogger's format.

    Its columns are the model's metrics and their ``val_`` twins whether or not
    the first epoch it logs validated (trainer.validate_every): an epoch without
    validation gets "NA" there. With ``append`` (a resumed run) the rows go
    after the file's own, under its header."""

    def __init__(self, filename: str, append: bool = False):
        super().__init__()
        self.filename = filename
        self.append = append
        self.keys: Optional[List[str]] = None

    def on_train_begin(self, logs: Dict[str, Any] | None = None) -> None:
        """Create the file (empty, or kept as it is with ``append``) when training starts, as Keras' CSVLogger
        does: a run that stops in its first epoch (a diverged loss) keeps its run dir and the reason in its log."""
        Path(self.filename).open("a" if self.append else "w").close()

    def on_epoch_end(self, epoch: int, logs: Dict[str, Any] | None = None) -> None:
        logs = {key: _fetched(value) for key, value in (logs or {}).items()}
        if self.keys is None and logs:
            metrics = [k for k in logs if not k.startswith("val_") and k not in EpochTimer.KEYS]
            self.keys = sorted(set(logs) | {"val_" + name for name in metrics})
        path = Path(self.filename)
        header = not (self.append and path.is_file() and path.stat().st_size > 0)
        with open(path, "a" if not header else "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["epoch", *(self.keys or [])], lineterminator="\n")
            if header:
                writer.writeheader()
            writer.writerow({"epoch": epoch + 1, **{k: _cell(logs[k]) if k in logs else "NA" for k in self.keys or []}})
        self.append = True  # the header is written: later epochs append


def _cell(value: Any) -> Any:
    """A log value as the CSV shows it (Keras' CSVLogger's rule: a number as is, a sequence as "[a, b]")."""
    if isinstance(value, str):
        return value
    array = np.asarray(value)
    return array.item() if array.ndim == 0 else "[" + ", ".join(map(str, array.tolist())) + "]"


def _fetched(value: Any) -> Any:
    """A log value as numbers. Keras 3 makes each one a float and leaves as it was one it cannot fetch: on JAX,
    a metric whose collective failed because another process died. Fetching it here raises that error itself,
    which the engine says in one line (``peer_failure``), instead of the CSV writer's TypeError about a 0-d array."""
    return value if isinstance(value, (str, int, float, np.ndarray)) else np.asarray(value)


class TrainingDiverged(CifarDistError, RuntimeError):
    """The loss or a weight became NaN or infinite; nothing of that epoch was recorded."""


class StopOnNonFinite(Callback):
    """End training with a one-line error once an epoch's loss, or any weight after it, is NaN or infinite.

    Keras's TerminateOnNaN checks each batch's own loss, which differs from
    rank to rank: one rank would stop while the others wait for it in the
    next allreduce. This checks the epoch's loss after Horovod's
    MetricAverageCallback has averaged it, which is the same number on every
    rank, so all ranks stop at the same point. The loss alone can hide dead
    weights (a NaN in a ReLU net's weights can leave the loss finite: ReLU
    turns the NaN it sees into 0), so every weight (BatchNorm's statistics
    too) is checked as well; the weights are the same on every rank after an
    averaged step. Placed before the writers, it keeps the diverged epoch out
    of metrics.json, the CSV log and the checkpoints: the run dir keeps the last
    finite epoch, and the run is not marked complete.
    """

    def __init__(self, lr: float):
        super().__init__()
        self.lr = lr

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise TrainingDiverged(self.message(f"the loss became {float(loss)} in epoch {epoch + 1}"))
        dead = first_non_finite_weight(self.model)
        if dead is not None:
            raise TrainingDiverged(self.message(f"{dead} after epoch {epoch + 1}"))

    def message(self, what: str) -> str:
        return (
            f"training diverged: {what} (nothing of that epoch was saved); lower optimizer.lr (the ranks used "
            f"{self.lr:g}) or add trainer.warmup_epochs, and train into a new hydra.run.dir"
        )


def first_non_finite_weight(model) -> Optional[str]:
    """ "layer L's weight W holds NaN" (or inf) for the first weight of ``model`` (either Keras) that is not all
    finite, or None when every weight is."""
    for variable, value in zip(model.weights, model.get_weights()):
        value = np.asarray(value)
        if not np.issubdtype(value.dtype, np.floating) or np.isfinite(value).all():
            continue
        kind = "NaN" if np.isnan(value).any() else "an infinite value"
        path = str(getattr(variable, "path", None) or variable.name).split(":")[0]
        layer, _, weight = path.rpartition("/")
        return f"layer {layer or '?'}'s weight {weight} holds {kind}"
    return None


class EpochTimer(Callback):
    """Adds ``epoch_seconds`` and ``images_per_sec`` (whole job, training
    steps only, validation excluded) to each epoch's logs."""

    KEYS = ("epoch_seconds", "images_per_sec")

    def __init__(self, images_per_epoch: int):
        super().__init__()
        self.images_per_epoch = images_per_epoch
        self._start = self._train_end = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()
        self._train_end = 0.0

    def on_test_begin(self, logs=None):
        if self._start and not self._train_end:
            self._train_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        train_seconds = (self._train_end or now) - self._start
        if logs is not None:
            logs["epoch_seconds"] = now - self._start
            logs["images_per_sec"] = self.images_per_epoch / max(train_seconds, 1e-9)


class AtomicCheckpoint(Callback):
    """Rank 0: after every epoch, the whole training state to checkpoints/checkpoint-NNN.h5 (.keras: Keras 3),
    atomically; with ``interval_s`` (trainer.checkpoint_interval_s), only once that many seconds have passed since
    the last one, and always after the run's last epoch and an epoch it stops after (a stop signal,
    trainer.max_epochs_per_run): a run of fraction-of-a-second epochs does not spend most of its time writing
    checkpoints, and one that stops can always resume where it stopped."""

    def __init__(self, directory: Path, keep: int, interval_s: float = 0.0):
        super().__init__()
        self.directory = directory
        self.keep = keep
        self.interval_s = float(interval_s)
        self._last = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        last_epoch = epoch + 1 >= int(self.params.get("epochs") or 0) or self._model.stop_training
        if self.interval_s and not last_epoch and time.monotonic() - self._last < self.interval_s:
            return
        path = checkpoints.checkpoint_path(self.directory, epoch + 1, checkpoints.model_suffix(self.model))
        checkpoints.atomic_save_model(self.model, path, include_optimizer=True)
        checkpoints.prune(self.directory, self.keep)
        self._last = time.monotonic()


class MetricsRecorder(Callback):
    """Rank 0: appends each epoch's (averaged) metrics to metrics.json, atomically, as it goes."""

    def __init__(self, path: Path, metrics: Dict[str, Any], on_update: Callable[[Dict[str, Any]], None] = None):
        super().__init__()
        self.path = path
        self.metrics = metrics
        self.on_update = on_update

    def on_epoch_end(self, epoch, logs=None):
        record = {"epoch": epoch + 1}
        for key, value in (logs or {}).items():
            record[key] = float(value)
        record["lr"] = current_lr(self.model.optimizer)
        epochs: List[Dict[str, Any]] = self.metrics.setdefault("epochs", [])
        epochs[:] = [e for e in epochs if e["epoch"] < record["epoch"]] + [record]
        if self.on_update:
            self.on_update(self.metrics)
        write_json(self.path, self.metrics)


NO_TENSORFLOW = "tensorboard.compat.notf"  # present: TensorBoard's compat layer takes its stub, not TensorFlow


class EpochTensorBoard(Callback):
    """Rank 0: each epoch's metrics as TensorBoard scalars, under the tags and folders Keras' TensorBoard callback
    uses (``train/`` and ``validation/``, ``epoch_loss``, ``epoch_accuracy``..., ``epoch_learning_rate``), written
    by TensorBoard's own framework-free writer: the same logs on every engine, TensorFlow or not."""

    def __init__(self, log_dir: Path):
        super().__init__()
        self.log_dir = Path(log_dir)
        self._writers: Dict[str, Any] = {}

    def _writer(self, split: str):
        if split not in self._writers:
            if "tensorflow" not in sys.modules:
                # TensorBoard's own switch to its TensorFlow-free stub (tensorboard.compat.tf): a process that has not
                # loaded TensorFlow (engine=jax) writes its events without importing an installed one.
                sys.modules.setdefault(NO_TENSORFLOW, types.ModuleType(NO_TENSORFLOW))
            from tensorboard.summary import Writer  # lazy: TensorBoard (no TensorFlow needed)

            self._writers[split] = Writer(str(self.log_dir / split))
        return self._writers[split]

    def on_epoch_end(self, epoch, logs=None):
        record = {key: float(value) for key, value in (logs or {}).items() if key not in EpochTimer.KEYS}
        record["learning_rate"] = current_lr(self.model.optimizer)
        for key, value in record.items():
            split, name = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            self._writer(split).add_scalar(f"epoch_{name}", value, step=epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


class ReseedEachEpoch(Callback):
    """Start every epoch's layer randomness (dropout) from (seed, epoch), not from where the last one ended.

    Keras layers draw from a ``tf.random.Generator`` each (with
    ``tf.keras.backend.experimental.enable_tf_random_generator()``, which the
    trainer turns on with ``trainer.deterministic``); its state is neither in
    the model's weights nor in a checkpoint, so a resumed run would otherwise
    draw different dropout masks from the run that was never stopped. Reset
    at every epoch's start, a run resumed at epoch k draws exactly what the
    uninterrupted run drew from epoch k on (with op determinism: bit for bit).
    """

    def __init__(self, seed: int):
        super().__init__()
        self.seed = int(seed)

    def generators(self):
        if flavor_of(self.model) == KERAS3:
            yield from self.keras3_generators()
            return
        yield from tf_random_generators(nested_layers(self.model))

    def keras3_generators(self):
        """Keras 3 layers draw from ``SeedGenerator``s whose state (a variable, not saved in a checkpoint)
        is the seed and a counter; resetting it is ``reset_from_seed``'s job for them."""
        for index, layer in enumerate(nested_layers(self.model)):
            for number, generator in enumerate(seed_generators(layer)):
                yield f"{index}.{number}", _Keras3Generator(generator)

    def on_epoch_begin(self, epoch, logs=None):
        for index, generator in self.generators():
            digest = hashlib.sha256(f"{self.seed}:{epoch}:{index}".encode()).digest()
            generator.reset_from_seed(int.from_bytes(digest[:8], "little") >> 1)


class _Keras3Generator:
    """A Keras 3 ``SeedGenerator`` with tf.random.Generator's ``reset_from_seed``: its state is (seed, counter)."""

    def __init__(self, generator):
        self.generator = generator

    def reset_from_seed(self, seed: int) -> None:
        state = self.generator.state
        self.generator.state.assign(np.array([seed % (2**31), 0], dtype=state.dtype))


class StopAfterEpochs(Callback):
    """Ends fit() after ``count`` epochs of this invocation (the same on every
    rank, so no rank waits for a collective the others never run)."""

    def __init__(self, count: int):
        super().__init__()
        self.count = count
        self.done = 0

    def on_epoch_end(self, epoch, logs=None):
        self.done += 1
        if self.done >= self.count:
            self.model.stop_training = True
