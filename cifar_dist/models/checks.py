"""What a model builder returned, checked against the data before training: one line, not a traceback from
inside ``fit`` (or a run that trains silently against the wrong loss).

A builder (``model._target_``) must return an uncompiled Keras model (Keras 2 ``tf.keras`` or Keras 3
``keras``) that takes the data's images and returns, per image, ``num_classes`` *probabilities*: its last
layer a softmax. The trainer's loss is categorical cross-entropy of probabilities; logits (no softmax)
train without an error but against the wrong loss. Checked on a few of the data's training images
(``model.predict``), which every Keras model of either flavour answers.
"""

from __future__ import annotations

import numpy as np

from cifar_dist.common.errors import ConfigError
from cifar_dist.common.keras_flavor import flavor_of, keras_module

CHECK_IMAGES = 8  # training images one prediction is made of
SUM_TOLERANCE = 0.02  # softmax outputs sum to 1 up to rounding (bfloat16 under mixed precision: ~1e-2)


def _is_model(model) -> bool:
    flavor = flavor_of(model)
    return bool(flavor) and isinstance(model, keras_module(flavor).Model)


def check_input(model, data) -> None:
    """A model whose input is not the data's image shape, refused in one line saying which setting to change."""
    try:
        takes = tuple(model.input_shape[1:])
    except (AttributeError, ValueError):  # a subclassed model not built yet: predict in check_model tells
        return
    gives = tuple(data.image_shape)
    if takes != gives:
        raise ConfigError(
            f"the model takes {takes} images but {data.source} gives {gives}; set "
            f"data.image_size={takes[0]} (data=folder), or use a model built for {gives} images"
        )


def check_is_model(model, target: str) -> None:
    """``model`` (what ``target`` built) is a Keras model of either Keras."""
    if not _is_model(model):
        raise ConfigError(
            f"model._target_={target} returned {type(model).__name__}, not a Keras model; "
            "return an uncompiled tf.keras.Model or keras.Model (docs/models.md)"
        )


def check_model(model, data, target: str, predict=None) -> None:
    """``model`` (what ``target`` built) is a Keras model taking the data's images to ``num_classes`` probabilities.

    ``predict(model, images)``: how this process scores images (default ``model.predict``; the JAX engine's
    scores them in this process alone, where ``predict`` would be a collective of the whole job)."""
    check_is_model(model, target)
    check_input(model, data)
    try:
        images = data.fit_images(CHECK_IMAGES)
        outputs = predict(model, images) if predict else model.predict(images, verbose=0)
    except Exception as exc:  # any Keras/TensorFlow error: the model cannot take these images
        text = str(exc).strip().splitlines()
        raise ConfigError(
            f"model._target_={target} cannot score {data.source}'s images "
            f"({type(exc).__name__}: {text[0] if text else ''}); check its input shape"
        ) from None
    for out in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
        _check_probabilities(np.asarray(out, np.float64), int(data.num_classes), target)


def _check_probabilities(out: np.ndarray, num_classes: int, target: str) -> None:
    if out.ndim != 2 or out.shape[-1] != num_classes:
        raise ConfigError(
            f"model._target_={target} returns outputs of shape {out.shape[1:]} per image, not "
            f"({num_classes},) for the data's {num_classes} classes; end it with "
            "Dense(num_classes) and a softmax, num_classes being the builder's argument"
        )
    sums = out.sum(axis=1)
    if out.min() < -SUM_TOLERANCE or out.max() > 1 + SUM_TOLERANCE or np.abs(sums - 1).max() > SUM_TOLERANCE:
        raise ConfigError(
            f"model._target_={target} returns scores that are not probabilities (on {len(out)} "
            f"training images: values {out.min():.3g}..{out.max():.3g}, sums {sums.min():.3g}..{sums.max():.3g}); "
            "end it with a softmax (layers.Activation('softmax', dtype='float32')): the loss is the "
            "cross-entropy of probabilities"
        )
