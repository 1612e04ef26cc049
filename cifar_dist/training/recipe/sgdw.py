"""SGD with decoupled weight decay (Loshchilov & Hutter) on Keras 2's legacy SGD (for Keras 3: keras3_optimizers.py).

Keras 2.18's new optimizers have ``weight_decay`` and
``exclude_from_weight_decay``, but cifar_dist's trainer and checkpoints use
the legacy optimizer API (slots created up front with ``_create_all_weights``
so Horovod's broadcast matches them by name, ``variables()``, h5 optimizer
state), so this adds the same two arguments, with the same meaning, to the
legacy SGD: before each update, ``w -= lr * weight_decay * w`` for every
variable whose name contains none of the excluded substrings. Also
``lr_multipliers`` ({name substring: factor}), airbench's higher learning rate
for BatchNorm biases: the variable's gradient is multiplied by the factor,
which for (Nesterov) momentum SGD is the same as multiplying its lr (the
decay keeps the plain lr, as airbench's). Horovod's
``DistributedOptimizer`` wraps it like any legacy optimizer (it averages the
gradients; the decay needs no communication: every rank holds the same weights).

``DecoupledDecay`` (``decoupled_decay.py``, no framework) holds what both
Keras' SGDW share. This module is Keras 2's: it imports TensorFlow.
"""

from __future__ import annotations

import tensorflow as tf

from cifar_dist.common.keras_internals import legacy_decayed_lr
from cifar_dist.training.recipe.decoupled_decay import DecoupledDecay


@tf.keras.utils.register_keras_serializable("cifar_dist")
class SGDW(DecoupledDecay, tf.keras.optimizers.legacy.SGD):
    def __init__(
        self,
        learning_rate=0.01,
        momentum=0.9,
        nesterov=True,
        weight_decay=0.0,
        exclude_from_weight_decay=(),
        lr_multipliers=None,
        name="SGDW",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, momentum=momentum, nesterov=nesterov, name=name, **kwargs)
        self._init_decay(weight_decay, exclude_from_weight_decay, lr_multipliers)

    @property
    def weight_decay(self) -> float:
        return self.decoupled_weight_decay

    @property
    def exclude_from_weight_decay(self):
        return self.decay_exclusions

    def decays(self, var) -> bool:
        return self.decays_name(var.name)

    def lr_multiplier(self, var) -> float:
        return self.lr_multiplier_of(var.name)

    def _decay(self, var):
        lr = legacy_decayed_lr(self, var.dtype.base_dtype)
        return var.assign_sub(lr * tf.cast(self.weight_decay, var.dtype.base_dtype) * var, read_value=False)

    def _resource_apply_dense(self, grad, var, apply_state=None):
        factor = self.lr_multiplier(var)
        if factor != 1.0:
            grad = grad * tf.cast(factor, grad.dtype)
        if not self.decays(var):
            return super()._resource_apply_dense(grad, var, apply_state)
        with tf.control_dependencies([self._decay(var)]):
            return super()._resource_apply_dense(grad, var, apply_state)

    def get_config(self):
        return {**super().get_config(), **self.decay_config()}
