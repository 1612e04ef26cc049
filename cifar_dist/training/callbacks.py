"""Keras callbacks of the training loop (besides Horovod's own).

Order matters and is set in trainer.py: the engine's metric averaging comes
first so that everything after it sees averaged metrics;
the writers below run on rank 0 only.

They subclass tf.keras's Callback and serve Keras 2 and Keras 3 models alike
(Keras 3's ``fit`` calls any object with the callback methods): they touch
only what both Keras' models have.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np
import tensorflow as tf

from cifar_dist.common.atomic_files import write_json
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.keras_flavor import KERAS3, flavor_of
from cifar_dist.common.keras_ops import current_lr
from cifar_dist.rundir import checkpoints


class EpochCSVLogger(tf.keras.callbacks.CSVLogger):
    """Keras' CSVLogger with epochs numbered as Keras prints them ("Epoch 1/3"), as in metrics.json
    and the checkpoint names (``checkpoint-001.h5`` holds epoch 1).

    Its columns are the model's metrics and their ``val_`` twins whether or not
    the first epoch it logs validated (trainer.validate_every): an epoch without
    validation gets "NA" there. (Keras would otherwise add ``val_`` twins of
    every key, timings included, or, resuming, columns unlike the file's header.)"""

    def on_epoch_end(self, epoch: int, logs: Dict[str, Any] | None = None) -> None:
        logs = {key: _fetched(value) for key, value in (logs or {}).items()}
        if self.keys is None and logs:
            metrics = [k for k in logs if not k.startswith("val_") and k not in EpochTimer.KEYS]
            self.keys = sorted(set(logs) | {"val_" + name for name in metrics})
        super().on_epoch_end(epoch + 1, logs)


def _fetched(value: Any) -> Any:
    """A log value as numbers. Keras 3 makes each one a float and leaves as it was one it cannot fetch: on JAX,
    a metric whose collective failed because another process died. Fetching it here raises that error itself,
    which the engine says in one line (``peer_failure``), instead of the CSV writer's TypeError about a 0-d array."""
    return value if isinstance(value, (str, int, float, np.ndarray)) else np.asarray(value)


class TrainingDiverged(CifarDistError, RuntimeError):
    """The loss became NaN or infinite; nothing of that epoch was recorded."""


class StopOnNonFiniteLoss(tf.keras.callbacks.Callback):
    """End training with a one-line error once an epoch's loss is NaN or infinite.

    Keras's TerminateOnNaN checks each batch's own loss, which differs from
    rank to rank: one rank would stop while the others wait for it in the
    next allreduce. This checks the epoch's loss after Horovod's
    MetricAverageCallback has averaged it, which is the same number on every
    rank, so all ranks stop at the same point. Placed before the writers, it
    keeps the diverged epoch out of metrics.json, the CSV log and the
    checkpoints: the run dir keeps the last finite epoch.
    """

    def __init__(self, lr: float):
        super().__init__()
        self.lr = lr

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise TrainingDiverged(
                f"training diverged: the loss became {float(loss)} in epoch {epoch + 1} (nothing of that epoch "
                f"was saved); lower optimizer.lr (the ranks used {self.lr:g}) or add trainer.warmup_epochs, "
                "and train into a new hydra.run.dir"
            )


class EpochTimer(tf.keras.callbacks.Callback):
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


class AverageEpochMetrics(tf.keras.callbacks.Callback):
    """The epoch's metrics averaged over the ranks, in place, before anything logs them.

    What Horovod's MetricAverageCallback does for Keras 2, through the engine,
    for models Horovod's Keras layer cannot serve (Keras 3). Every rank's logs
    hold the same keys; they are averaged in one collective, in sorted order."""

    def __init__(self, engine):
        super().__init__()
        self.engine = engine

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if isinstance(v, (int, float)) or hasattr(v, "__float__"))
        averaged = self.engine.average_numbers([float(logs[k]) for k in keys])
        logs.update(zip(keys, (float(v) for v in averaged)))


class AtomicCheckpoint(tf.keras.callbacks.Callback):
    """Rank 0: after every epoch, the whole training state to checkpoints/checkpoint-NNN.h5 (.keras: Keras 3),
    atomically."""

    def __init__(self, directory: Path, keep: int):
        super().__init__()
        self.directory = directory
        self.keep = keep

    def on_epoch_end(self, epoch, logs=None):
        path = checkpoints.checkpoint_path(self.directory, epoch + 1, checkpoints.model_suffix(self.model))
        checkpoints.atomic_save_model(self.model, path, include_optimizer=True)
        checkpoints.prune(self.directory, self.keep)


class MetricsRecorder(tf.keras.callbacks.Callback):
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


class ReseedEachEpoch(tf.keras.callbacks.Callback):
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
        for index, layer in enumerate(self.model._flatten_layers(include_self=False)):
            rng = getattr(layer, "_random_generator", None)
            if rng is None or not hasattr(rng, "_maybe_init"):
                continue
            rng._maybe_init()
            if isinstance(getattr(rng, "_generator", None), tf.random.Generator):
                yield index, rng._generator

    def keras3_generators(self):
        """Keras 3 layers draw from ``SeedGenerator``s whose state (a variable, not saved in a checkpoint)
        is the seed and a counter; resetting it is ``reset_from_seed``'s job for them."""
        for index, layer in enumerate(self.model._flatten_layers(include_self=False)):
            for number, generator in enumerate(getattr(layer, "_seed_generators", ())):
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


class StopAfterEpochs(tf.keras.callbacks.Callback):
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
