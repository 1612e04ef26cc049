"""SGD with decoupled weight decay (Loshchilov & Hutter), on Keras 2's legacy SGD.

Keras 2.18's new optimizers have ``weight_decay`` and
``exclude_from_weight_decay``, but cifar_dist's trainer and checkpoints use
the legacy optimizer API (slots created up front with ``_create_all_weights``
so Horovod's broadcast matches them by name, ``variables()``, h5 optimizer
state), so this adds the same two arguments, with the same meaning, to the
legacy SGD: before each update, ``w -= lr * weight_decay * w`` for every
variable whose name contains none of the excluded substrings. Horovod's
``DistributedOptimizer`` wraps it like any legacy optimizer (it averages the
gradients; the decay needs no communication: every rank holds the same weights).
"""
from __future__ import annotations

import tensorflow as tf


@tf.keras.utils.register_keras_serializable("cifar_dist")
class SGDW(tf.keras.optimizers.legacy.SGD):
    def __init__(self, learning_rate=0.01, momentum=0.9, nesterov=True, weight_decay=0.0,
                 exclude_from_weight_decay=(), name="SGDW", **kwargs):
        super().__init__(learning_rate=learning_rate, momentum=momentum, nesterov=nesterov, name=name, **kwargs)
        self.weight_decay = float(weight_decay)
        self.exclude_from_weight_decay = list(exclude_from_weight_decay or [])

    def decays(self, var) -> bool:
        return self.weight_decay > 0 and not any(part in var.name for part in self.exclude_from_weight_decay)

    def _decay(self, var):
        lr = self._decayed_lr(var.dtype.base_dtype)
        return var.assign_sub(lr * tf.cast(self.weight_decay, var.dtype.base_dtype) * var, read_value=False)

    def _resource_apply_dense(self, grad, var, apply_state=None):
        if not self.decays(var):
            return super()._resource_apply_dense(grad, var, apply_state)
        with tf.control_dependencies([self._decay(var)]):
            return super()._resource_apply_dense(grad, var, apply_state)

    def get_config(self):
        return {**super().get_config(), "weight_decay": self.weight_decay,
                "exclude_from_weight_decay": self.exclude_from_weight_decay}
