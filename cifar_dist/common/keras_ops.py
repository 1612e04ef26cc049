"""The few tensor ops cifar_dist's own layers, schedules and TTA use, in ``keras.ops``' words, for either Keras.

``ops_of(keras)`` is ``keras.ops`` itself for Keras 3 (so the same code runs
on TensorFlow's backend and on JAX's), and for Keras 2 (``tf.keras``, which
has no ``ops``) a namespace of the TensorFlow functions with the same names
and arguments: the very ops the Keras 2 code called before Keras 3 existed
here, so Keras 2's numbers are unchanged to the bit. Code written against it
(``ops.cast``, ``ops.conv``...) is written once for both Keras; ``registered(keras)``
registers a class with that Keras' own registry.
"""

from __future__ import annotations

import functools
from types import ModuleType, SimpleNamespace
from typing import Optional

from cifar_dist.common.keras_flavor import KERAS2, KERAS3, flavor_of, keras_module

PACKAGE = "cifar_dist"  # the package name this project's Keras objects are registered under ("cifar_dist>Scale")


def keras_or_default(keras: Optional[ModuleType]) -> ModuleType:
    """The Keras module to build with: ``keras`` as given, ``tf.keras`` (Keras 2, the default) for None."""
    return keras_module(KERAS2) if keras is None else keras


def module_flavor(keras: ModuleType) -> int:
    """2 or 3: which Keras the module ``keras`` (``tf.keras`` or ``keras``) is."""
    return flavor_of(keras.layers.Layer)


def registered(keras: ModuleType):
    """The class decorator that registers a class with ``keras``' own registry, under ``PACKAGE``."""
    if module_flavor(keras) == KERAS3:
        return keras.saving.register_keras_serializable(PACKAGE)
    return keras.utils.register_keras_serializable(PACKAGE)


def per_keras(build):
    """Memoise ``build(keras)`` per Keras (2 or 3): one result, e.g. one set of registered classes, per Keras.

    Keyed by the flavor, not by the module object: ``tf.keras`` is TensorFlow's
    lazy loader, whose hash is not stable while it loads.
    """
    cached = functools.lru_cache(maxsize=None)(lambda flavor: build(keras_module(flavor)))

    @functools.wraps(build)
    def for_keras(keras: ModuleType):
        return cached(module_flavor(keras))

    return for_keras


@per_keras
def ops_of(keras: ModuleType):
    """``keras.ops`` for Keras 3; TensorFlow's equivalents under the same names for Keras 2 (``tf.keras``)."""
    if module_flavor(keras) == KERAS3:
        return keras.ops
    import tensorflow as tf  # lazy: TensorFlow

    return SimpleNamespace(
        cast=tf.cast,
        minimum=tf.minimum,
        where=tf.where,
        add=tf.add,
        conv=lambda inputs, kernel, strides=1, padding="valid": tf.nn.conv2d(inputs, kernel, strides, padding.upper()),
        flip=lambda x, axis: tf.reverse(x, axis=[axis]),
        pad=lambda x, pad_width, mode="constant": tf.pad(x, pad_width, mode=mode.upper()),
        split=lambda x, indices_or_sections, axis=0: tf.split(x, indices_or_sections, axis=axis),
        convert_to_numpy=lambda x: x.numpy(),
    )


def current_lr(optimizer) -> float:
    """The lr an optimizer of either Keras applies at its current step (a schedule is evaluated there)."""
    if flavor_of(optimizer) == KERAS3:
        import keras  # lazy: Keras 3, only for a Keras 3 optimizer

        return float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    import tensorflow as tf  # lazy: TensorFlow

    lr = optimizer.lr
    if isinstance(lr, tf.keras.optimizers.schedules.LearningRateSchedule):
        lr = lr(optimizer.iterations)
    return float(tf.keras.backend.get_value(lr))
