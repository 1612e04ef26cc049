"""What the benchmark's stand-alone variants share: data loading, an epoch clock, the result file.

Used by ``seed_reference.py`` and ``bench_bare_keras.py`` so that both time
and report epochs exactly as cifar_dist's ``EpochTimer`` does (training steps
only; validation excluded from images/s, included in ``epoch_seconds``).
"""

from __future__ import annotations

import json
import resource
import time

import tensorflow as tf


class EpochClock(tf.keras.callbacks.Callback):
    """Per epoch: training-only images/s, epoch seconds (with validation), Keras logs, wall time."""

    def __init__(self, images_per_epoch: int, process_start: float):
        super().__init__()
        self.images_per_epoch = images_per_epoch
        self.process_start = process_start
        self.epochs = []
        self._start = self._train_end = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._start, self._train_end = time.perf_counter(), 0.0

    def on_test_begin(self, logs=None):
        if self._start and not self._train_end:
            self._train_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        record = {k: float(v) for k, v in (logs or {}).items()}
        record.update(
            epoch=epoch + 1,
            epoch_seconds=now - self._start,
            images_per_sec=self.images_per_epoch / max((self._train_end or now) - self._start, 1e-9),
            wall_time_s=time.time() - self.process_start,
        )
        self.epochs.append(record)


def load_arrays(source: str):
    """``cifar10.load_data()``'s ((x_train, y_train), (x_test, y_test)) uint8 layout, without a download.

    ``source`` is ``sample`` (the packaged real-image sample) or a CIFAR-10
    path (tarball or ``cifar-10-batches-py`` folder), read by cifar_dist's
    loader so every variant trains on the very same images.
    """
    from omegaconf import OmegaConf

    from cifar_dist.data import load_dataset

    cfg = {"name": "sample"} if source == "sample" else {"name": "cifar10", "path": source, "download": False}
    data = load_dataset(OmegaConf.create(cfg))
    return (data.x_train, data.y_train.reshape(-1, 1)), (data.x_test, data.y_test.reshape(-1, 1))


def peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def write_result(path: str, **fields) -> None:
    with open(path, "w") as f:
        json.dump(fields, f, indent=1)
