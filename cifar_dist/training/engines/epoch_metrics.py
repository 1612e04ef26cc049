"""The epoch's metrics averaged over the ranks, for the engines whose ranks each compute their own (Horovod's
Keras 3 models: Horovod's own MetricAverageCallback serves only Keras 2)."""

from __future__ import annotations

from cifar_dist.common.keras_callback import Callback


class AverageEpochMetrics(Callback):
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
