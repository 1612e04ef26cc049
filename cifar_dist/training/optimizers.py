"""Optimizer factories named by the ``optimizer`` options in ``cifar_dist/config/schema.py`` (``_target_``).

For Keras 2 (``keras=None``, the default, or ``tf.keras``) they build Keras
2's *legacy* optimizers: those keep the seed's ``decay`` argument (lr / (1 +
decay * iterations)), their ``lr`` is a variable that Horovod's
warmup/schedule callbacks can set, and Horovod's DistributedOptimizer wraps
them as documented. For Keras 3 (``keras`` the Keras 3 module, passed by the
trainer like ``num_classes``: not a config key) they build Keras 3
optimizers with the same maths: the legacy ``decay`` becomes an lr schedule
(``with_legacy_decay``), RMSprop and SGDW are the twins in
``keras3_optimizers.py``, SGD and Adam are Keras 3's own. ``lr`` arrives
already scaled to the world size by the trainer (a float or a schedule of
the same Keras: ``schedules.build_schedule``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Optional

from cifar_dist.common.keras_flavor import KERAS3
from cifar_dist.common.keras_ops import module_flavor


def _is_keras3(keras: Optional[ModuleType]) -> bool:
    return keras is not None and module_flavor(keras) == KERAS3


def with_legacy_decay(lr, decay: float, keras: ModuleType):
    """Keras 2's legacy ``decay`` as a Keras 3 lr: ``lr / (1 + decay * step)``, over a float or a schedule."""
    if not decay:
        return lr
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
        from cifar_dist.training.recipe.schedules import schedule_classes  # lazy: TensorFlow

        return schedule_classes(keras).InverseTimeDecayed(lr, decay)
    return keras.optimizers.schedules.InverseTimeDecay(lr, decay_steps=1, decay_rate=decay)


def rmsprop(lr: float, decay: float = 1e-6, rho: float = 0.9, epsilon: float = 1e-7, keras=None):
    if _is_keras3(keras):
        from cifar_dist.training.recipe.keras3_optimizers import RMSprop  # lazy: TensorFlow, Keras 3

        return RMSprop(learning_rate=with_legacy_decay(lr, decay, keras), rho=rho, epsilon=epsilon)
    import tensorflow as tf  # lazy: TensorFlow

    return tf.keras.optimizers.legacy.RMSprop(learning_rate=lr, rho=rho, epsilon=epsilon, decay=decay)


def sgd(lr: float, momentum: float = 0.9, nesterov: bool = False, decay: float = 0.0, keras=None):
    if _is_keras3(keras):
        return keras.optimizers.SGD(
            learning_rate=with_legacy_decay(lr, decay, keras), momentum=momentum, nesterov=nesterov
        )
    import tensorflow as tf  # lazy: TensorFlow

    return tf.keras.optimizers.legacy.SGD(learning_rate=lr, momentum=momentum, nesterov=nesterov, decay=decay)


def adam(lr: float, decay: float = 0.0, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7, keras=None):
    if _is_keras3(keras):
        return keras.optimizers.Adam(
            learning_rate=with_legacy_decay(lr, decay, keras), beta_1=beta_1, beta_2=beta_2, epsilon=epsilon
        )
    import tensorflow as tf  # lazy: TensorFlow

    return tf.keras.optimizers.legacy.Adam(learning_rate=lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, decay=decay)


def sgdw(
    lr,
    momentum: float = 0.9,
    nesterov: bool = True,
    weight_decay: float = 5e-4,
    exclude_from_weight_decay=("batch_normalization", "bias", "gamma", "beta"),
    lr_multipliers=None,
    keras=None,
):
    """Nesterov SGD with decoupled weight decay (and per-variable lr factors); ``lr`` may be a LearningRateSchedule."""
    if _is_keras3(keras):
        from cifar_dist.training.recipe.keras3_optimizers import SGDW  # lazy: TensorFlow, Keras 3
    else:
        from cifar_dist.training.recipe.sgdw import SGDW  # lazy: TensorFlow

    return SGDW(
        learning_rate=lr,
        momentum=momentum,
        nesterov=nesterov,
        weight_decay=weight_decay,
        exclude_from_weight_decay=list(exclude_from_weight_decay),
        lr_multipliers=dict(lr_multipliers or {}),
    )
