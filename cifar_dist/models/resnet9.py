"""David Page's ResNet-9 (DAWNBench 2018: 94 % on CIFAR-10 in 24 epochs on one V100), with a width knob."""

from __future__ import annotations

from typing import Sequence

from cifar_dist.common.keras_ops import keras_or_default


def build(
    num_classes: int = 10,
    width: int = 64,
    batchnorm_momentum: float = 0.9,
    output_scale: float = 0.125,
    input_shape: Sequence[int] = (32, 32, 3),
    keras=None,
):
    """prep conv_bn(w); conv_bn(2w)+pool + residual; conv_bn(4w)+pool; conv_bn(8w)+pool + residual; max pool;
    linear x 0.125.

    ``keras``: the Keras module to build with (``keras_flavor.keras_module``), from the trainer; None is tf.keras."""
    from cifar_dist.models.blocks import classifier, conv_bn, residual  # lazy: TensorFlow

    keras = keras_or_default(keras)
    m = batchnorm_momentum
    inputs = keras.Input(shape=tuple(input_shape))
    x = conv_bn(inputs, width, m, keras=keras)
    x = conv_bn(x, 2 * width, m, pool=True, keras=keras)
    x = residual(x, 2 * width, m, keras=keras)
    x = conv_bn(x, 4 * width, m, pool=True, keras=keras)
    x = conv_bn(x, 8 * width, m, pool=True, keras=keras)
    x = residual(x, 8 * width, m, keras=keras)
    return keras.Model(inputs, classifier(x, num_classes, output_scale, keras=keras), name="resnet9")
