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

``DecoupledDecay`` holds what both Keras' SGDW share: the arguments, which
variable decays and its lr factor (by the variable's name: ``var.name`` in
Keras 2, ``"batch_normalization/beta:0"``; ``var.path`` in Keras 3,
``"batch_normalization/beta"``), and their config.
"""

from __future__ import annotations

import tensorflow as tf


class DecoupledDecay:
    """SGDW's own arguments, for an optimizer class of either Keras (a mixin)."""

    def _init_decay(self, weight_decay, exclude_from_weight_decay, lr_multipliers) -> None:
        self.decoupled_weight_decay = float(weight_decay)
        self.decay_exclusions = list(exclude_from_weight_decay or [])
        self.lr_multipliers = {str(k): float(v) for k, v in dict(lr_multipliers or {}).items()}

    def decays_name(self, name: str) -> bool:
        return self.decoupled_weight_decay > 0 and not any(part in name for part in self.decay_exclusions)

    def lr_multiplier_of(self, name: str) -> float:
        """The product of the factors whose substring is in the variable's name (1 when none)."""
        factor = 1.0
        for part, value in self.lr_multipliers.items():
            if part in name:
                factor *= value
        return factor

    def decay_config(self) -> dict:
        return {
            "weight_decay": self.decoupled_weight_decay,
            "exclude_from_weight_decay": list(self.decay_exclusions),
            "lr_multipliers": dict(self.lr_multipliers),
        }


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
        lr = self._decayed_lr(var.dtype.base_dtype)
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
