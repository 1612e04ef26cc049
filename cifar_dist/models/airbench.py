"""airbench94's net (Keller Jordan 2024: 94 % on CIFAR-10 in 2.6 s on one A100), in Keras, with a width knob."""

from __future__ import annotations

from typing import Sequence

from cifar_dist.common.keras_ops import keras_or_default


def build(
    num_classes: int = 10,
    widths: Sequence[int] = (64, 256, 256),
    whitening_kernel: int = 2,
    batchnorm_momentum: float = 0.6,
    output_scale: float = 1 / 9,
    input_shape: Sequence[int] = (32, 32, 3),
    keras=None,
):
    """PatchWhitening (frozen, fitted by the trainer) + GELU, then per width:
    conv -> pool -> BN -> GELU -> conv -> BN -> GELU (convs identity-initialised,
    BN without a trained scale, as airbench), then max pool, linear x 1/9.

    ``keras``: the Keras module to build with (``keras_flavor.keras_module``), from the trainer; None is tf.keras."""
    from cifar_dist.models.blocks import classifier, conv_bn, custom_layers  # lazy: TensorFlow

    keras = keras_or_default(keras)
    m = batchnorm_momentum
    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Activation("gelu")(custom_layers(keras).PatchWhitening(whitening_kernel)(inputs))
    for width in widths:
        x = conv_bn(x, width, m, pool=True, activation="gelu", identity_init=True, scale=False, keras=keras)
        x = conv_bn(x, width, m, activation="gelu", identity_init=True, scale=False, keras=keras)
    return keras.Model(inputs, classifier(x, num_classes, output_scale, keras=keras), name="airbench")
