"""Optimizer factories named by the ``optimizer`` options in ``cifar_dist/config.py`` (``_target_``).

They build Keras 2's *legacy* optimizers: those keep the seed's ``decay``
argument (lr / (1 + decay * iterations)), their ``lr`` is a variable that
Horovod's warmup/schedule callbacks can set, and Horovod's
DistributedOptimizer wraps them as documented. ``lr`` arrives already scaled
to the world size by the trainer.
"""
from __future__ import annotations


def rmsprop(lr: float, decay: float = 1e-6, rho: float = 0.9, epsilon: float = 1e-7):
    import tensorflow as tf

    return tf.keras.optimizers.legacy.RMSprop(learning_rate=lr, rho=rho, epsilon=epsilon, decay=decay)


def sgd(lr: float, momentum: float = 0.9, nesterov: bool = False, decay: float = 0.0):
    import tensorflow as tf

    return tf.keras.optimizers.legacy.SGD(learning_rate=lr, momentum=momentum, nesterov=nesterov, decay=decay)


def adam(lr: float, decay: float = 0.0, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7):
    import tensorflow as tf

    return tf.keras.optimizers.legacy.Adam(
        learning_rate=lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, decay=decay
    )


def sgdw(lr, momentum: float = 0.9, nesterov: bool = True, weight_decay: float = 5e-4,
         exclude_from_weight_decay=("batch_normalization", "bias", "gamma", "beta"), lr_multipliers=None):
    """Nesterov SGD with decoupled weight decay (and per-variable lr factors); ``lr`` may be a LearningRateSchedule."""
    from cifar_dist.training.sgdw import SGDW

    return SGDW(learning_rate=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                exclude_from_weight_decay=list(exclude_from_weight_decay), lr_multipliers=dict(lr_multipliers or {}))
