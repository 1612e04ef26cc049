"""The two Keras a model may be written in, and how to tell which one an object belongs to.

cifar_dist runs models of either:

* **Keras 2** (``tf.keras`` with ``TF_USE_LEGACY_KERAS=1``, the ``tf_keras``
  package), the Keras Horovod's Keras layer was written for;
* **Keras 3** (``import keras``, what every Keras guide writes today), on
  TensorFlow's backend under Horovod, or on JAX's under ``engine=jax``.

Both are importable in one process. Code that must build Keras objects takes
the Keras *module* it builds with (``keras_module(2)`` is ``tf.keras``,
``keras_module(3)`` is ``keras``), so each piece is written once; code that
receives a Keras object asks ``flavor_of`` which Keras made it. Keras 3 is
imported only where a Keras 3 object is asked for: a Keras 2 run never loads
it (it costs ~1.5 s per rank).
"""

from __future__ import annotations

import inspect
import sys
from types import ModuleType
from typing import Mapping

from cifar_dist.common.errors import CifarDistError

KERAS2, KERAS3 = 2, 3
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"


def legacy_keras(environ: Mapping[str, str]) -> str:
    """TF_USE_LEGACY_KERAS for this process and its ranks: the user's explicit value, else "1".

    Horovod 0.28 supports Keras 2 only. TensorFlow >= 2.16 binds tf.keras to Keras 3 unless this is set
    before TensorFlow is imported; with tf-keras installed it binds tf.keras to Keras 2. An explicit "0" is
    kept (a Keras 2 run then refuses Keras 3 in one line, training/process/horovod_env.py); unset or blank is "1".
    """
    value = environ.get(LEGACY_KERAS_ENV, "")
    return value if value.strip() else "1"


class KerasChoiceError(CifarDistError, RuntimeError):
    """The Keras asked for cannot be had in this process."""


def keras_module(version: int) -> ModuleType:
    """The Keras namespace of ``version``: ``tf.keras`` (tf-keras) for 2, the ``keras`` package for 3."""
    if int(version) == KERAS2:
        import tensorflow as tf  # lazy: TensorFlow

        if flavor_of(tf.keras.layers.Layer) != KERAS2:
            raise KerasChoiceError(
                "Keras 2 was asked for (engine.keras=2, the built-in models' default) but tf.keras is Keras 3 here "
                "(TF_USE_LEGACY_KERAS=0); unset TF_USE_LEGACY_KERAS (importing cifar_dist sets it to 1), "
                "or build the built-ins in Keras 3 with engine.keras=3"
            )
        return tf.keras
    if int(version) == KERAS3:
        import keras  # lazy: Keras 3

        return keras
    raise ValueError(f"Keras {version!r}: cifar_dist runs Keras 2 (tf-keras) or Keras 3")


def flavor_of(obj) -> int:
    """2 or 3: the Keras whose class ``obj`` (a model, layer, optimizer or loss) or its class derives from.

    Decided from the class hierarchy, so a user's subclass defined in any module is recognised.
    0 for an object of neither.
    """
    cls = obj if isinstance(obj, type) else type(obj)
    for klass in cls.__mro__:
        root = klass.__module__.split(".")[0]
        if root == "tf_keras":
            return KERAS2
        if root == "keras" and _is_keras3(klass):
            return KERAS3
    return 0


def _is_keras3(klass) -> bool:
    """A class of the ``keras`` package counts as Keras 3 only where that package is Keras 3 (TF >= 2.16)."""
    keras = sys.modules.get("keras")
    return keras is not None and str(getattr(keras, "__version__", "")).startswith("3.")


def version_of(keras) -> str:
    """The version of the package behind a Keras module (tf.keras: tf-keras's)."""
    return str(getattr(sys.modules[keras.__name__.split(".")[0]], "__version__", "unknown"))


def name(version: int) -> str:
    """How messages name a Keras: 'Keras 2 (tf.keras)' or 'Keras 3 (keras)'."""
    return "Keras 2 (tf.keras)" if int(version) == KERAS2 else "Keras 3 (keras)"


KERAS_ARGUMENT = "keras"  # what the trainer passes to a builder or optimizer factory that declares it


def takes_keras_argument(fn) -> bool:
    """Whether ``fn`` (a builder or optimizer factory) declares a ``keras`` parameter: the trainer then passes
    the Keras module to build with, as it passes ``num_classes`` from the data. Built-ins declare it; a user's
    builder needs not (it builds with the Keras it imports)."""
    try:
        return KERAS_ARGUMENT in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or a class without a readable signature
        return False


def keras_argument(fn, version: int) -> dict:
    """``{"keras": <the Keras module of version>}`` for ``fn`` that declares it, else ``{}``: the keyword
    arguments the trainer adds to a builder's or an optimizer factory's call."""
    return {KERAS_ARGUMENT: keras_module(version)} if takes_keras_argument(fn) else {}


def as_tf_variable(variable):
    """The tf.Variable behind a variable of either Keras on TensorFlow (Keras 3 keeps it as ``value``)."""
    import tensorflow as tf  # lazy: TensorFlow

    return variable if isinstance(variable, tf.Variable) else variable.value
