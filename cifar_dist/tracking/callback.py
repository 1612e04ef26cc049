"""The Keras callback that sends each epoch's metrics to the tracker as the epoch ends (rank 0 only)."""

from __future__ import annotations

from typing import Any, Callable, Dict

from cifar_dist.common.keras_callback import Callback
from cifar_dist.common.keras_ops import current_lr


class EpochMetricsLogger(Callback):
    """Hands ``{"epoch": n, <logs>..., "lr": ...}`` to ``log_epoch`` after every epoch.

    Placed after the engine's metric averaging and EpochTimer (trainer.py),
    so the logs are averaged over ranks and carry images_per_sec, as in
    metrics.json.
    """

    def __init__(self, log_epoch: Callable[[Dict[str, Any]], None]):
        super().__init__()
        self.log_epoch = log_epoch

    def on_epoch_end(self, epoch, logs=None):
        record: Dict[str, Any] = {"epoch": epoch + 1}
        record.update({key: float(value) for key, value in (logs or {}).items()})
        record["lr"] = current_lr(self.model.optimizer)  # as metrics.json has it, for either Keras
        self.log_epoch(record)
