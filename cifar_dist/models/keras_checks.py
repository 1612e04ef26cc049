"""What a built model must be to train here, checked once before any data is read: one line each.

* one Keras: every layer of the model from the Keras the model is (a Keras 3
  model holding a tf.keras layer, or the reverse, cannot train or save);
* on the Horovod engine a Keras 3 model runs on TensorFlow's backend (the
  backend Keras 3 was started with is fixed for the process);
* it saves and loads: every custom layer has ``get_config`` and is registered,
  or the first checkpoint would fail after a whole epoch (or, worse, load as
  something else).
"""

from __future__ import annotations

import os

from cifar_dist.common.engine_facts import engine_facts
from cifar_dist.common.errors import ConfigError
from cifar_dist.common.keras_flavor import KERAS2, KERAS3, flavor_of, name
from cifar_dist.common.keras_internals import nested_layers
from cifar_dist.models.checks import check_is_model

TENSORFLOW_BACKEND = "tensorflow"  # Keras 3's name for TensorFlow's backend (keras.backend.backend())


class ModelKerasError(ConfigError):
    """The model cannot train on this engine as built."""


def build_failure(exc: BaseException, target: str) -> ModelKerasError:
    """One line for a builder that raised: a model mixing the two Keras fails inside both of them."""
    cause = exc.__cause__ or exc  # hydra.utils.instantiate wraps the builder's exception
    if _crossed_keras(cause):
        return ModelKerasError(
            f"model._target_={target} mixes Keras: building it called into both Keras 3 (keras) and Keras 2 (tf.keras) "
            f"({type(cause).__name__}: {_first_line(cause)}); build every layer with one Keras "
            "(import keras for Keras 3, or tf.keras for Keras 2)"
        )
    return ModelKerasError(
        f"model._target_={target} failed to build the model ({type(cause).__name__}: {_first_line(cause)}); "
        "fix the builder (try calling it in Python with num_classes=10)"
    )


def _crossed_keras(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside one Keras while it held an object of the other (a Keras 3 tensor
    given to a tf.keras layer, or the reverse): what a model mixing the two fails with."""
    tb = exc.__traceback__
    while tb is not None:
        root = str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0]
        inside = {"tf_keras": KERAS2, "keras": KERAS3}.get(root)
        if inside and any(flavor_of(item) not in (0, inside) for item in _locals(tb.tb_frame)):
            return True
        tb = tb.tb_next
    return False


def _locals(frame):
    """A frame's local values, and the items of its local lists and tuples (a layer's inputs)."""
    for value in list(frame.f_locals.values()):
        yield value
        if isinstance(value, (list, tuple)):
            yield from value[:16]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def model_flavor(model, target: str) -> int:
    """The Keras of ``model`` (2 or 3), with every layer of that same Keras; one line otherwise."""
    check_is_model(model, target)
    flavor = flavor_of(model)
    others = sorted({type(layer).__name__ for layer in nested_layers(model) if flavor_of(layer) not in (flavor, 0)})
    if others:
        raise ModelKerasError(
            f"model._target_={target} mixes Keras: a {name(flavor)} model with "
            f"{name(KERAS2 if flavor == KERAS3 else KERAS3)} "
            f"layers ({', '.join(others)}); build every layer with one Keras (import keras for Keras 3, "
            "or tf.keras for Keras 2)"
        )
    return flavor


def check_backend(flavor: int, engine_name: str, target: str = "") -> None:
    """A model of a Keras the engine does not train is refused (engine=jax trains Keras 3 only); a Keras 3 model on
    an engine that trains Keras 3 on TensorFlow's backend (horovod, tensorflow) must run on that backend."""
    facts = engine_facts(engine_name)
    if facts is not None and flavor not in facts.keras_versions:
        versions = " or ".join(str(v) for v in facts.keras_versions)
        raise ModelKerasError(
            f"model._target_={target} builds a {name(flavor)} model, but engine={engine_name} trains Keras {versions} "
            "models only; write it with `import keras` (docs/engines.md), or train it with engine=horovod (the "
            "horovod stack installs it: docs/install.md)"
        )
    if flavor != KERAS3 or not _keras3_on_tensorflow(engine_name):
        return
    import keras  # lazy: Keras 3

    backend = keras.backend.backend()
    if backend != TENSORFLOW_BACKEND:
        raise _wrong_backend(backend, engine_name)


def _keras3_on_tensorflow(engine_name: str) -> bool:
    """Whether the engine trains Keras 3 models on TensorFlow's backend (horovod, tensorflow; not jax)."""
    facts = engine_facts(engine_name)
    return facts is not None and facts.keras3_backend == TENSORFLOW_BACKEND


def backend_asked_for(environ=None) -> str:
    """The Keras 3 backend KERAS_BACKEND asks for ("" when unset)."""
    return (os.environ if environ is None else environ).get("KERAS_BACKEND", "").strip()


def import_failure(exc: ConfigError, engine_name: str) -> ConfigError:
    """A builder that cannot be imported where KERAS_BACKEND names another backend: Keras 3 itself failed
    to start on it (its package missing, say), which is the line to give."""
    backend = backend_asked_for()
    if _keras3_on_tensorflow(engine_name) and backend and backend != TENSORFLOW_BACKEND:
        return _wrong_backend(backend, engine_name)
    return exc


def _wrong_backend(backend: str, engine_name: str) -> ModelKerasError:
    return ModelKerasError(
        f"Keras 3 is set to the {backend} backend here (KERAS_BACKEND or ~/.keras/keras.json), but "
        f"engine={engine_name} trains Keras 3 on TensorFlow's; unset KERAS_BACKEND (or set it to tensorflow)"
    )


def check_saveable(model, target: str) -> None:
    """The model's config round-trips through its Keras' serialization (what every checkpoint relies on)."""
    flavor = flavor_of(model)
    try:
        if flavor == KERAS3:
            import keras  # lazy: Keras 3

            keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
        else:
            import tensorflow as tf  # lazy: TensorFlow

            tf.keras.utils.deserialize_keras_object(tf.keras.utils.serialize_keras_object(model))
    except Exception as exc:  # NotImplementedError (no get_config), TypeError/ValueError (not registered)
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelKerasError(
            f"model._target_={target} builds a model that cannot be saved and loaded back ({why[:300]}); "
            "give each custom layer "
            "a get_config() returning its __init__ arguments and register it "
            "(@keras.saving.register_keras_serializable() for Keras 3, "
            "@tf.keras.utils.register_keras_serializable() for Keras 2)"
        ) from None


def check_model(model, target: str, engine_name: str) -> int:
    """Every check above; returns the model's Keras (2 or 3)."""
    flavor = model_flavor(model, target)
    check_backend(flavor, engine_name, target)
    check_saveable(model, target)
    return flavor
