"""Test-time augmentation: a model that averages the class probabilities of augmented views.

``with_tta(model, "flip")`` returns a Keras model that scores each image and
its mirror image and averages the two; ``"flip_translate"`` adds both views
shifted by one pixel down-right and up-left (reflected borders), weighted as
airbench's level-2 TTA (0.25 for each unshifted view, 0.125 for each
shifted one). All views go through the model in one call, stacked along the
batch. The wrapper shares the trained model's weights, so it can be
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
    _, averaged = _scored_views(model, inputs, mode)
    return tf.keras.Model(inputs, averaged, name=f"{model.name}_tta_{mode}")


def plain_and_tta(model, mode: str):
    """A model with two outputs, ``plain`` (the model's own probabilities) and ``tta`` (``with_tta``'s),
    from one pass: the plain scores are those of the unchanged view the average already needs."""
    inputs = tf.keras.Input(shape=model.input_shape[1:])
    plain, averaged = _scored_views(model, inputs, mode)
    plain = tf.keras.layers.Lambda(lambda p: p, dtype="float32", name="plain")(plain)
    return tf.keras.Model(inputs, {"plain": plain, "tta": averaged}, name=f"{model.name}_plain_and_tta_{mode}")


def _scored_views(model, inputs, mode: str):
    """(the unchanged view's probabilities, their weighted average over ``views``), the views scored by one
    call of ``model`` on all of them stacked along the batch (one compiled step, whatever the mode)."""
    weighted = views(inputs, mode)
    stacked = tf.keras.layers.Concatenate(axis=0, dtype=inputs.dtype)([view for _, view in weighted])
    scored = tf.split(model(stacked), len(weighted), axis=0)
    parts = [tf.keras.layers.Lambda(lambda p, w=weight: p * w, dtype="float32")(probs)
             for (weight, _), probs in zip(weighted, scored)]
    return scored[0], tf.keras.layers.Add(dtype="float32", name="tta")(parts)
