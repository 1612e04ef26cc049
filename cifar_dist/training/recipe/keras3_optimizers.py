"""Keras 3 twins of the Keras 2 (legacy) optimizers cifar_dist's factories build, with the same maths.

Imported only for a Keras 3 optimizer (it imports Keras 3). ``keras.ops`` only,
so they run on any Keras 3 backend.

- ``RMSprop``: Keras 2's legacy RMSprop (no momentum, not centred) divides by
  ``sqrt(ms) + epsilon``; Keras 3's by ``sqrt(ms + epsilon)``, a different
  step while ``ms`` is small. This one takes Keras 2's.
- ``SGDW``: Nesterov SGD with decoupled weight decay and per-variable lr
  factors (training/recipe/sgdw.py), on Keras 3's SGD: the decay
  ``w -= lr * weight_decay * w`` before the step, the gradient times the
  variable's lr factor. Keras 3's own ``weight_decay`` is not used: its
  exclusions match ``variable.name`` ("beta"), not the layer-qualified name
  (``variable.path``, "batch_normalization/beta") Keras 2's SGDW matched.

The legacy ``decay`` argument (lr / (1 + decay * iterations)) is an lr
schedule in Keras 3 (``optimizers.with_legacy_decay``).
"""

from __future__ import annotations

import keras
from keras import ops

from cifar_dist.common.keras_internals import optimizer_model_variable, rmsprop_velocity
from cifar_dist.common.keras_ops import registered
from cifar_dist.training.recipe.decoupled_decay import DecoupledDecay


@registered(keras)
class RMSprop(keras.optimizers.RMSprop):
    """Keras 3's RMSprop with Keras 2's legacy step: ``var -= lr * g / (sqrt(ms) + epsilon)``."""

    def update_step(self, gradient, variable, learning_rate):
        if self.momentum > 0 or self.centered:
            return super().update_step(gradient, variable, learning_rate)
        lr = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        velocity = rmsprop_velocity(self, variable)
        self.assign(
            velocity, ops.add(ops.multiply(self.rho, velocity), ops.multiply(1 - self.rho, ops.square(gradient)))
        )
        self.assign_sub(variable, ops.divide(ops.multiply(lr, gradient), ops.add(ops.sqrt(velocity), self.epsilon)))


@registered(keras)
class SGDW(DecoupledDecay, keras.optimizers.SGD):
    """training/recipe/sgdw.py's SGDW on Keras 3 (module docstring); its variables are matched by ``variable.path``."""

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

    def path_of(self, variable) -> str:
        """The model variable's path: ``update_step`` may get the backend's variable (TensorFlow's), not Keras'."""
        return optimizer_model_variable(self, variable).path

    def update_step(self, gradient, variable, learning_rate):
        path = self.path_of(variable)
        factor = self.lr_multiplier_of(path)
        if factor != 1.0:
            gradient = ops.multiply(gradient, ops.cast(factor, gradient.dtype))
        if self.decays_name(path):
            lr = ops.cast(learning_rate, variable.dtype)
            self.assign_sub(
                variable,
                ops.multiply(ops.multiply(lr, ops.cast(self.decoupled_weight_decay, variable.dtype)), variable),
            )
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), **self.decay_config()}
