"""Building blocks of the modern CIFAR-10 nets (ResNet-9, airbench), reusable in any model.

Written once for both Keras: every builder takes ``keras`` (the module to
build with, ``keras_flavor.keras_module(2|3)``; None is ``tf.keras``). The
custom layers exist per Keras (``custom_layers(keras)``), registered with
that Keras (package ``cifar_dist``), so a saved model or checkpoint that uses
them loads with that Keras' ``load_model`` once they are defined
(``cifar_dist.evaluation.custom_objects.register_custom_objects(keras)``).
Importing this module imports no framework: ``blocks.Scale`` and
``blocks.PatchWhitening`` are Keras 2's, defined when first asked for.

- ``conv_bn``: Conv2D (no bias: BatchNorm's shift replaces it) + BatchNorm + activation.
- ``residual``: x + conv_bn(conv_bn(x)) (Page's ResNet-9 block).
- ``PatchWhitening``: a frozen conv whose filters whiten the k x k patches of
  the training images (airbench); ``adapt(images)`` fits it, as Keras'
  preprocessing layers do.
- ``partial_identity``: a conv kernel made identity on its first in-channels
  filters (airbench's ``dirac_`` init), kept as initialised elsewhere.
- ``Scale``: multiply by a constant (the logit scale of both nets).
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Optional

import numpy as np

from cifar_dist.common.keras_flavor import KERAS2, flavor_of, keras_module
from cifar_dist.common.keras_internals import nested_layers
from cifar_dist.common.keras_ops import keras_or_default, ops_of, per_keras, registered


def partial_identity(kernel: np.ndarray) -> np.ndarray:
    """``kernel`` (kh, kw, in, out) with output channel i < in replaced by the identity (centre tap of input i).

    Applied once after the conv is built (not as a Keras initializer, so saved
    models carry a plain initializer in their config and load anywhere).
    """
    kh, kw, c_in, c_out = kernel.shape
    n = min(c_in, c_out)
    out = np.array(kernel, copy=True)
    out[:, :, :, :n] = 0.0
    out[kh // 2, kw // 2, np.arange(n), np.arange(n)] = 1.0
    return out


@per_keras
def custom_layers(keras: ModuleType) -> SimpleNamespace:
    """This package's layers (``Scale``, ``PatchWhitening``) as classes of ``keras`` (``tf.keras`` or Keras 3).

    Defined once per Keras module (memoised: one class, one registration) and
    registered with that Keras under the same names (``cifar_dist>Scale``...),
    their maths in ``ops_of(keras)`` (TensorFlow's ops for Keras 2, ``keras.ops``
    for Keras 3, so they run on any Keras 3 backend).
    """
    ops = ops_of(keras)

    @registered(keras)
    class Scale(keras.layers.Layer):
        """Multiplies its input by a constant (airbench's 1/9, ResNet-9's 0.125 on the logits)."""

        def __init__(self, factor: float, **kwargs):
            super().__init__(**kwargs)
            self.factor = float(factor)

        def call(self, inputs):
            return inputs * ops.cast(self.factor, inputs.dtype)

        def compute_output_shape(self, input_shape):
            return input_shape

        def get_config(self):
            return {**super().get_config(), "factor": self.factor}

    @registered(keras)
    class PatchWhitening(keras.layers.Layer):
        """A k x k 'valid' conv whose 2 x k*k*c filters are the training patches' whitening basis and its negative.

        The filters are frozen; the bias (initialised to centre the patches) trains.
        Call ``adapt(images)`` with float training images before training (the
        trainer does, through ``adapt(model, images)``); until then the filters are random.
        """

        def __init__(self, kernel_size: int = 2, epsilon: float = 5e-4, **kwargs):
            super().__init__(**kwargs)
            self.kernel_size = int(kernel_size)
            self.epsilon = float(epsilon)

        def build(self, input_shape):
            k, c = self.kernel_size, int(input_shape[-1])
            self.filters = 2 * k * k * c
            self.kernel = self.add_weight(
                name="kernel", shape=(k, k, c, self.filters), initializer="glorot_uniform", trainable=False
            )
            self.bias = self.add_weight(name="bias", shape=(self.filters,), initializer="zeros", trainable=True)
            super().build(input_shape)

        def call(self, inputs):
            kernel = ops.cast(self.kernel, inputs.dtype)
            return ops.add(ops.conv(inputs, kernel, 1, "valid"), ops.cast(self.bias, inputs.dtype))

        def compute_output_shape(self, input_shape):
            k = self.kernel_size
            h, w = (None if n is None else n - k + 1 for n in input_shape[1:3])
            return (input_shape[0], h, w, self.filters)

        def adapt(self, images: np.ndarray) -> None:
            """Fit the filters to the k x k patches of ``images`` (N, H, W, C floats)."""
            if not self.built:
                self.build(tuple(images.shape))
            kernel, bias = whitening_filters(images, self.kernel_size, self.epsilon)
            self.kernel.assign(kernel)
            self.bias.assign(bias)

        def get_config(self):
            return {**super().get_config(), "kernel_size": self.kernel_size, "epsilon": self.epsilon}

    return SimpleNamespace(Scale=Scale, PatchWhitening=PatchWhitening)


def __getattr__(name: str):
    """``Scale`` and ``PatchWhitening``: Keras 2's classes (as before Keras 3 existed here), defined on first use,
    so that importing this module for a Keras 3 model on JAX needs no TensorFlow."""
    if name in ("Scale", "PatchWhitening"):
        return getattr(custom_layers(keras_module(KERAS2)), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def whitening_filters(images: np.ndarray, k: int, epsilon: float):
    """(kernel (k, k, c, 2 k k c), bias) of the whitening conv fitted to the k x k patches of ``images``: the
    eigenbasis of the patches' covariance scaled to unit variance (``epsilon`` added), and its negative;
    the bias centres the patches. numpy in, float32 numpy out, whatever Keras the layer is."""
    x = np.asarray(images, np.float32)
    mean, covariance = patch_statistics(x, k)  # (kh, kw, c) order
    eigenvalues, eigenvectors = np.linalg.eigh(covariance)
    basis = eigenvectors / np.sqrt(eigenvalues + epsilon)  # columns whiten
    filters = np.concatenate([basis, -basis], axis=1)
    c = int(x.shape[-1])
    return filters.reshape(k, k, c, filters.shape[1]).astype(np.float32), (-mean @ filters).astype(np.float32)


def patch_statistics(images: np.ndarray, k: int, chunk: int = 256):
    """The mean and the sample covariance (``np.cov``'s, N - 1) of the k x k patches of ``images`` (each patch a
    row, its values in (kh, kw, c) order), in float64.

    The same sums as ``np.cov`` on a float64 copy of every patch (the mean,
    then the centred X^T X), made ``chunk`` images at a time: no float64 copy
    of all 3.9 M patches of the sample is ever made. The float32 filters are
    the numpy recipe's to the bit (tests/models/test_models_modern.py).
    """

    def rows():  # float64 patches of one chunk of images at a time
        for start in range(0, len(images), chunk):
            windows = np.lib.stride_tricks.sliding_window_view(images[start : start + chunk], (k, k), axis=(1, 2))
            # (n, h, w, c, kh, kw) -> (n, h, w, kh, kw, c): each patch's values in (kh, kw, c) order, copied once,
            # straight into float64 (not to a float32 copy first: a third less time, the same values)
            patches = np.empty(windows.shape[:3] + (k, k, windows.shape[3]), np.float64)
            patches[...] = windows.transpose(0, 1, 2, 4, 5, 3)
            yield patches.reshape(-1, k * k * images.shape[-1])

    total, count = 0.0, 0
    for part in rows():
        total = total + part.sum(axis=0)
        count += len(part)
    mean = total / count
    scatter = 0.0
    for part in rows():
        centered = part - mean
        scatter = scatter + centered.T @ centered
    return mean, scatter / (count - 1)


def batch_norm(x, momentum: float, scale: bool = True, name=None, keras: Optional[ModuleType] = None):
    """BatchNorm with the float32 statistics Keras keeps under mixed precision."""
    layers = keras_or_default(keras).layers
    return layers.BatchNormalization(momentum=momentum, epsilon=1e-5, scale=scale, name=name)(x)


def conv_bn(
    x,
    filters: int,
    momentum: float,
    pool: bool = False,
    activation: str = "relu",
    identity_init: bool = False,
    scale: bool = True,
    keras: Optional[ModuleType] = None,
):
    """3x3 conv (no bias) [+ 2x2 max pool] + BatchNorm + activation: the unit of both nets."""
    keras = keras_or_default(keras)
    conv = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, kernel_initializer="he_uniform")
    x = conv(x)
    if identity_init:
        conv.kernel.assign(partial_identity(ops_of(keras).convert_to_numpy(conv.kernel)))
    if pool:
        x = keras.layers.MaxPooling2D(2)(x)
    x = batch_norm(x, momentum, scale=scale, keras=keras)
    return keras.layers.Activation(activation)(x)


def residual(x, filters: int, momentum: float, activation: str = "relu", keras: Optional[ModuleType] = None):
    """x + conv_bn(conv_bn(x)): ResNet-9's residual block (filters must equal x's channels)."""
    y = conv_bn(x, filters, momentum, activation=activation, keras=keras)
    y = conv_bn(y, filters, momentum, activation=activation, keras=keras)
    return keras_or_default(keras).layers.Add()([x, y])


def classifier(x, num_classes: int, output_scale: float, keras: Optional[ModuleType] = None):
    """Global max pool, linear (no bias), scaled logits, float32 softmax (stays float32 under mixed precision)."""
    keras = keras_or_default(keras)
    x = keras.layers.GlobalMaxPooling2D()(x)
    x = keras.layers.Dense(num_classes, use_bias=False)(x)
    x = custom_layers(keras).Scale(output_scale)(x)
    return keras.layers.Activation("softmax", dtype="float32")(x)


def data_fitted_layers(model):
    """The layers of ``model`` (of either Keras) that must see the training images before training (``adapt``)."""
    flavor = flavor_of(model)
    if not flavor:
        return []
    whitening = custom_layers(keras_module(flavor)).PatchWhitening
    return [layer for layer in nested_layers(model) if isinstance(layer, whitening)]


def adapt(model, images: np.ndarray) -> int:
    """``adapt`` every layer of ``model`` that learns from the data before training; returns how many did."""
    fitted = data_fitted_layers(model)
    for layer in fitted:
        layer.adapt(images)
    return len(fitted)
