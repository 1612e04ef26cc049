"""Test-time augmentation: a model that averages the class probabilities of augmented views.

``with_tta(model, "flip")`` returns a Keras model that scores each image and
its mirror image and averages the two; ``"flip_translate"`` adds both views
shifted by one pixel down-right and up-left (reflected borders), weighted as
airbench's level-2 TTA (0.25 for each unshifted view, 0.125 for each
shifted one). All views go through the model in one call, stacked along the
batch. The wrapper shares the trained model's weights, so it can be
compiled and evaluated like the model itself (the trainer's exact sharded
test and ``task=evaluate`` use it).

Written once for both Keras: the wrapper is built with the Keras that made
``model`` (``keras_flavor.flavor_of``), its ops in ``keras_ops.ops_of`` (no
TensorFlow op, and no ``Lambda``, in a Keras 3 graph).
"""

from __future__ import annotations

from cifar_dist.common.keras_flavor import KERAS2, flavor_of, keras_module
from cifar_dist.common.keras_ops import ops_of


def mirror(images, ops=None):
    """Left-right mirror of an NHWC batch (``ops``: ``keras_ops.ops_of`` of the Keras it is in; Keras 2's default)."""
    return _ops(ops).flip(images, axis=2)


def shift(images, dy: int, dx: int, ops=None):
    """Shift an NHWC batch by (dy, dx) whole pixels, reflecting at the borders (any image size)."""
    pad = max(abs(dy), abs(dx))
    padded = _ops(ops).pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="reflect")
    return padded[:, pad - dy : _end(pad + dy), pad - dx : _end(pad + dx), :]


def _end(cut: int):
    """The slice end that drops ``cut`` rows/columns at the end (None for none)."""
    return -cut if cut else None


def _ops(ops):
    return ops if ops is not None else ops_of(keras_module(KERAS2))


def views(images, mode: str, ops=None):
    """The (weight, view) pairs that ``mode`` averages over; the weights sum to 1."""
    if mode == "none":
        return [(1.0, images)]
    flipped = [(0.5, images), (0.5, mirror(images, ops))]
    if mode == "flip":
        return flipped
    if mode == "flip_translate":
        shifted = [shift(images, 1, 1, ops), shift(images, -1, -1, ops)]
        return (
            [(0.25, v) for _, v in flipped] + [(0.125, s) for s in shifted] + [(0.125, mirror(s, ops)) for s in shifted]
        )
    raise ValueError(f"unknown TTA mode {mode!r}; use none, flip or flip_translate")


def with_tta(model, mode: str):
    """``model`` itself for mode "none", else a model (in ``model``'s Keras) averaging its probabilities over views."""
    if mode == "none":
        return model
    keras = _keras_of(model)
    inputs = keras.Input(shape=model.input_shape[1:])
    _, averaged = _scored_views(keras, model, inputs, mode)
    return keras.Model(inputs, averaged, name=f"{model.name}_tta_{mode}")


def plain_and_tta(model, mode: str):
    """A model with two outputs, ``plain`` (the model's own probabilities) and ``tta`` (``with_tta``'s),
    from one pass: the plain scores are those of the unchanged view the average already needs."""
    keras = _keras_of(model)
    inputs = keras.Input(shape=model.input_shape[1:])
    plain, averaged = _scored_views(keras, model, inputs, mode)
    plain = keras.layers.Identity(dtype="float32", name="plain")(plain)
    return keras.Model(inputs, {"plain": plain, "tta": averaged}, name=f"{model.name}_plain_and_tta_{mode}")


def _keras_of(model):
    """The Keras module that made ``model`` (Keras 2's for an object of neither)."""
    return keras_module(flavor_of(model) or KERAS2)


def _scored_views(keras, model, inputs, mode: str):
    """(the unchanged view's probabilities, their weighted average over ``views``), the views scored by one
    call of ``model`` on all of them stacked along the batch (one compiled step, whatever the mode)."""
    ops = ops_of(keras)
    weighted = views(inputs, mode, ops)
    stacked = keras.layers.Concatenate(axis=0, dtype=inputs.dtype)([view for _, view in weighted])
    scored = ops.split(model(stacked), len(weighted), axis=0)
    parts = [keras.layers.Rescaling(weight, dtype="float32")(probs) for (weight, _), probs in zip(weighted, scored)]
    return scored[0], keras.layers.Add(dtype="float32", name="tta")(parts)
