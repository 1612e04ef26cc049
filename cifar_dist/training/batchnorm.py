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

import tensorflow as tf


def moving_statistics(model) -> List[tf.Variable]:
    """The moving mean and variance of every BatchNormalization layer in ``model``."""
    found = []
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            found += [layer.moving_mean, layer.moving_variance]
    return found


def average_moving_statistics(model) -> int:
    """Replace every rank's moving statistics by their mean over the ranks; returns how many variables.

    A collective: every rank must call it at the same point (callbacks and
    the trainer do, on all ranks alike). A no-op for models without BatchNorm.
    """
    import horovod.tensorflow as hvd

    variables = moving_statistics(model)
    if not variables or hvd.size() == 1:
        return len(variables)
    # HOROVOD: one grouped allreduce (Average) for all statistics; every rank
    # receives the same bytes, so the ranks' models are identical afterwards.
    averaged = hvd.grouped_allreduce([v.value() for v in variables], op=hvd.Average, name="batchnorm_moving_statistics")
    for var, value in zip(variables, averaged):
        var.assign(value)
    return len(variables)


class AverageBatchNormStatistics(tf.keras.callbacks.Callback):
    """Averages the moving statistics across ranks before validation and at each epoch's end.

    Place it before the callbacks that write checkpoints, so a checkpoint is
    the job's model, not rank 0's.
    """

    def on_test_begin(self, logs=None):
        average_moving_statistics(self.model)

    def on_epoch_end(self, epoch, logs=None):
        average_moving_statistics(self.model)
