"""Test-time augmentation: a model that averages the class probabilities of augmented views.

``with_tta(model, "flip")`` returns a Keras model that scores each image and
its mirror image and averages the two; ``"flip_translate"`` adds both views
shifted by one pixel down-right and up-left (reflected borders), weighted as
airbench's level-2 TTA (0.25 for each unshifted view, 0.125 for each
shifted one). The wrapper shares the trained model's weights, so it can be
compiled and evaluated like the model itself (the trainer's exact sharded
test and ``task=evaluate`` use it).
"""
from __future__ import annotations

import tensorflow as tf


def mirror(images):
    """Left-right mirror of an NHWC batch."""
    return tf.reverse(images, axis=[2])


def shift(images, dy: int, dx: int):
    """Shift an NHWC batch by (dy, dx) whole pixels, reflecting at the borders."""
    pad = max(abs(dy), abs(dx))
    padded = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="REFLECT")
    h, w = tf.shape(images)[1], tf.shape(images)[2]
    return padded[:, pad - dy: pad - dy + h, pad - dx: pad - dx + w, :]


def views(images, mode: str):
    """The (weight, view) pairs that ``mode`` averages over; the weights sum to 1."""
    if mode == "none":
        return [(1.0, images)]
    flipped = [(0.5, images), (0.5, mirror(images))]
    if mode == "flip":
        return flipped
    if mode == "flip_translate":
        shifted = [shift(images, 1, 1), shift(images, -1, -1)]
        return [(0.25, v) for _, v in flipped] + [(0.125, s) for s in shifted] + [(0.125, mirror(s)) for s in shifted]
    raise ValueError(f"unknown TTA mode {mode!r}; use none, flip or flip_translate")


def with_tta(model, mode: str):
    """``model`` itself for mode "none", else a model averaging its probabilities over ``views``."""
    if mode == "none":
        return model
    inputs = tf.keras.Input(shape=model.input_shape[1:])
    scored = [tf.keras.layers.Lambda(lambda p, w=weight: p * w, dtype="float32")(model(view))
              for weight, view in views(inputs, mode)]
    return tf.keras.Model(inputs, tf.keras.layers.Add(dtype="float32")(scored), name=f"{model.name}_tta_{mode}")
