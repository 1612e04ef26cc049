"""airbench94's net (Keller Jordan 2024: 94 % on CIFAR-10 in 2.6 s on one A100), in Keras, with a width knob."""
from __future__ import annotations

from typing import Sequence


def build(
    num_classes: int = 10,
    widths: Sequence[int] = (64, 256, 256),
    whitening_kernel: int = 2,
    batchnorm_momentum: float = 0.6,
    output_scale: float = 1 / 9,
    input_shape: Sequence[int] = (32, 32, 3),
):
    """PatchWhitening (frozen, fitted by the trainer) + GELU, then per width:
    conv -> pool -> BN -> GELU -> conv -> BN -> GELU (convs identity-initialised,
    BN without a trained scale, as airbench), then max pool, linear x 1/9."""
    import tensorflow as tf

    from cifar_dist.models.blocks import PatchWhitening, classifier, conv_bn

    m = batchnorm_momentum
    inputs = tf.keras.Input(shape=tuple(input_shape))
    x = tf.keras.layers.Activation("gelu")(PatchWhitening(whitening_kernel)(inputs))
    for width in widths:
        x = conv_bn(x, width, m, pool=True, activation="gelu", identity_init=True, scale=False)
        x = conv_bn(x, width, m, activation="gelu", identity_init=True, scale=False)
    return tf.keras.Model(inputs, classifier(x, num_classes, output_scale), name="airbench")
