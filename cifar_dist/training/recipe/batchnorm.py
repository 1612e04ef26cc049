"""BatchNorm under Horovod: one set of moving statistics for the whole job.

Gradients are averaged across ranks, but BatchNorm's moving mean and variance
are not gradients: each rank updates them from its own batches, so after a
step the ranks' models differ (``ranks_in_sync`` false) and a checkpoint
would hold rank 0's view only. Horovod's own answer,
``hvd.SyncBatchNormalization``, all-reduces the batch statistics in every
training step of every layer; on CPU ranks that is two collectives per layer
per step. Here the moving statistics are averaged across ranks instead,
once, wherever they are used or saved: before every validation, at the end
of every epoch (before the checkpoint is written) and before the final test.
Training itself normalises with each rank's batch statistics, as any
data-parallel BatchNorm without sync does.
"""

from __future__ import annotations

from typing import List

from cifar_dist.common.keras_callback import Callback
from cifar_dist.common.keras_flavor import flavor_of, keras_module
from cifar_dist.common.keras_internals import nested_layers


def moving_statistics(model) -> List:
    """The moving mean and variance of every BatchNormalization layer in ``model`` (either Keras)."""
    found = []
    for layer in nested_layers(model):
        if _is_batch_norm(layer):
            found += [layer.moving_mean, layer.moving_variance]
    return found


def _is_batch_norm(layer) -> bool:
    flavor = flavor_of(layer)
    return bool(flavor) and isinstance(layer, keras_module(flavor).layers.BatchNormalization)


def average_moving_statistics(model, engine) -> int:
    """Replace every rank's moving statistics by their mean over the ranks; returns how many variables.

    A collective: every rank must call it at the same point (callbacks and
    the trainer do, on all ranks alike). A no-op for models without BatchNorm.
    """
    variables = moving_statistics(model)
    engine.average_variables(variables, name="batchnorm_moving_statistics")
    return len(variables)


class AverageBatchNormStatistics(Callback):
    """Averages the moving statistics across ranks before validation and at each epoch's end.

    Place it before the callbacks that write checkpoints, so a checkpoint is
    the job's model, not rank 0's.
    """

    def __init__(self, engine):
        super().__init__()
        self.engine = engine

    def on_test_begin(self, logs=None):
        average_moving_statistics(self.model, self.engine)

    def on_epoch_end(self, epoch, logs=None):
        average_moving_statistics(self.model, self.engine)
