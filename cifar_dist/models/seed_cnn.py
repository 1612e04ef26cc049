"""The seed tutorial's CNN, layer for layer (Keras' examples/cifar10_cnn.py)."""

from __future__ import annotations

from typing import Sequence

from cifar_dist.common.keras_ops import keras_or_default


def build(
    num_classes: int = 10,
    input_shape: Sequence[int] = (32, 32, 3),
    conv_dropout: float = 0.25,
    dense_units: int = 512,
    dense_dropout: float = 0.5,
    keras=None,
):
    """Conv32-Conv32-Pool-Dropout, Conv64-Conv64-Pool-Dropout, Dense512-Dropout, Dense softmax.

    Separate Activation layers and the final float32 softmax are kept as in the
    seed, so that saved models have the seed's layer list (and so that the
    softmax stays float32 under mixed precision).

    ``keras``: the Keras module to build with (``keras_flavor.keras_module``), from the trainer; None is tf.keras.
    """
    keras = keras_or_default(keras)
    layers = keras.layers
    return keras.Sequential(
        [
            layers.Input(shape=tuple(input_shape)),
            layers.Conv2D(32, (3, 3), padding="same"),
            layers.Activation("relu"),
            layers.Conv2D(32, (3, 3)),
            layers.Activation("relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Dropout(conv_dropout),
            layers.Conv2D(64, (3, 3), padding="same"),
            layers.Activation("relu"),
            layers.Conv2D(64, (3, 3)),
            layers.Activation("relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Dropout(conv_dropout),
            layers.Flatten(),
            layers.Dense(dense_units),
            layers.Activation("relu"),
            layers.Dropout(dense_dropout),
            layers.Dense(num_classes),
            layers.Activation("softmax", dtype="float32"),
        ],
        name="seed_cnn",
    )
