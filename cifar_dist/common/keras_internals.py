"""Every private API of Keras (Keras 3's ``keras``, Keras 2's ``tf_keras``) cifar_dist relies on, in one place.

Keras has no public way to do these; each function says which private thing it uses. A Keras release that
removes or changes one fails the test named after it (tests/common/test_private_apis.py), and the fix is here.
Nothing else in the project imports ``keras.src``/``tf_keras.src`` or reads these attributes
(tests/project/test_structure.py). Keras is imported only where a function needs it.

Three classes also answer private hooks Keras calls on them, which cannot be calls through here; the same test
file checks that Keras still calls them:

* ``tf_keras``'s legacy optimizers: SGDW overrides ``_resource_apply_dense`` (training/recipe/sgdw.py), and
  engine=tensorflow's averaging subclass ``_compute_gradients`` (training/engines/mpi_gradients.py);
* ``tf_keras``'s ``CallbackList`` asks a callback ``_implements_train_batch_hooks`` (and the test and predict
  ones) and ``_supports_tf_logs``, which common/keras_callback.py's ``Callback`` answers.
"""

from __future__ import annotations

import sys
from typing import Any, BinaryIO, Iterator, Optional, Sequence, Tuple

from cifar_dist.common.optional_imports import hidden

JaxState = Tuple[list, list, list, list]  # (trainable, non-trainable, optimizer, metrics) variables' values


# --- both Keras -------------------------------------------------------------------------------------------------


def nested_layers(model) -> list:
    """Every layer inside ``model``, however deep (``model.layers`` is only the top level): ``Layer._flatten_layers``,
    of both Keras."""
    return list(model._flatten_layers(include_self=False))


def mark_default_hook(hook):
    """Mark a callback hook as the no-op both Keras skip: the ``_is_default`` attribute their ``@default`` sets
    (``keras.src.utils.python_utils.default``, ``tf_keras.src.utils.generic_utils.default``)."""
    hook._is_default = True
    return hook


def is_default_hook(hook) -> bool:
    """Whether a callback hook is the no-op both Keras skip (``_is_default``, what their ``is_default`` reads)."""
    return getattr(hook, "_is_default", False)


# --- Keras 3 ----------------------------------------------------------------------------------------------------


def save_model_to_file(model, file: BinaryIO) -> None:
    """A Keras 3 model written as its ``.keras`` zip to an open file: ``keras.src.saving.saving_lib.save_model``
    (the public ``keras.saving.save_model`` takes only a path ending in ".keras")."""
    from keras.src.saving import saving_lib  # lazy: Keras 3

    saving_lib.save_model(model, file)


def seed_generators(layer) -> Sequence:
    """The ``SeedGenerator``s a Keras 3 layer draws its randomness from: ``Layer._seed_generators``."""
    return tuple(getattr(layer, "_seed_generators", ()))


# What ``import keras`` tries to import for integrations training never calls, whenever they are installed (the
# tracking extra's MLflow brings scikit-learn and pandas): scikit-learn for keras.wrappers' estimators
# (keras.src.wrappers), pandas for fit()'s DataFrame inputs (keras.src.trainers.data_adapters.array_slicing),
# matplotlib.pyplot for keras.visualization's galleries. Together ~0.7-2 s of Keras' ~2-4 s import.
KERAS_OPTIONAL_IMPORTS = ("sklearn", "pandas", "matplotlib")


def import_keras_for_training():
    """``import keras`` in a training process, without its optional integrations' imports
    (``KERAS_OPTIONAL_IMPORTS``, hidden while Keras loads: ``common/optional_imports.py``), so that Keras' own
    fallbacks apply. Relies on Keras importing them in ``try: ... except ImportError`` blocks, in the modules
    named above."""
    with hidden(*KERAS_OPTIONAL_IMPORTS):
        import keras  # lazy: Keras 3 (its backend chosen by then)
    return keras


def tensorflow_only_where_loaded() -> None:
    """Keras 3 asks ``tensorflow.available`` (importing TensorFlow where it is installed) on any backend: to seed it
    (``keras.utils.set_random_seed``) and to tell TensorFlow objects apart when it saves a model. In a process that
    has not loaded TensorFlow (engine=jax) no object is TensorFlow's and no TensorFlow needs seeding, so Keras'
    lazy module answers from what is loaded: TensorFlow stays out (its GPU build breaks JAX's NCCL collectives on
    several GPUs, jax-ml/jax#34918; its import costs seconds). A tf.data factory, which imports TensorFlow itself,
    finds it as before. Relies on ``keras.src.utils.module_utils.tensorflow``, the ``LazyModule`` instance Keras'
    modules import as ``tf``, and its ``available`` property."""
    from keras.src.utils import module_utils  # lazy: Keras 3

    class LoadedOnly(module_utils.LazyModule):
        """Keras' lazy module of TensorFlow, available only once something else imported TensorFlow."""

        @property
        def available(self):
            return "tensorflow" in sys.modules and super().available

    lazy = module_utils.tensorflow
    if type(lazy) is module_utils.LazyModule:
        lazy.__class__ = LoadedOnly


def optimizer_slot(optimizer, slots: Sequence, variable) -> Any:
    """The slot of ``slots`` (a list an optimizer keeps, one per trainable variable) for ``variable`` (which in a
    step may be the backend's variable, not Keras'): ``Optimizer._get_variable_index``."""
    return slots[optimizer._get_variable_index(variable)]


def rmsprop_velocity(optimizer, variable) -> Any:
    """Keras 3 RMSprop's mean square for ``variable``: ``RMSprop._velocities``."""
    return optimizer_slot(optimizer, optimizer._velocities, variable)


def optimizer_model_variable(optimizer, variable) -> Any:
    """The model's own ``keras.Variable`` for the one an optimizer step gets: ``Optimizer._trainable_variables``."""
    return optimizer_slot(optimizer, optimizer._trainable_variables, variable)


def symbolic_build(model, data_batch) -> None:
    """Build what ``fit``/``evaluate`` build before their first step (the compiled loss and metrics, the optimizer's
    variables) from a batch or its shapes: ``Trainer._symbolic_build``."""
    model._symbolic_build(data_batch=data_batch)


# --- Keras 3 on JAX: the training state of JAXTrainer.fit -------------------------------------------------------


def jax_state(model, purge_model_variables: bool) -> JaxState:
    """The model's state as ``fit`` trains it on JAX, ``purge_model_variables``: the variables emptied until the
    state is written back: ``JAXTrainer._get_jax_state``."""
    return model._get_jax_state(
        trainable_variables=True,
        non_trainable_variables=True,
        optimizer_variables=True,
        metrics_variables=True,
        purge_model_variables=purge_model_variables,
    )


def hold_jax_state(model, state: Optional[JaxState]) -> None:
    """Give the model ``state`` (None: none) as ``fit`` does mid-epoch, for the public ``jax_state_sync`` to write
    back to its variables: ``JAXTrainer._jax_state``, the dict of the four groups."""
    if state is None:
        model._jax_state = None
        return
    trainable, non_trainable, optimizer, metrics = state
    model._jax_state = {
        "trainable_variables": trainable,
        "non_trainable_variables": non_trainable,
        "optimizer_variables": optimizer,
        "metrics_variables": metrics,
    }


def jax_state_synced(model) -> bool:
    """Whether the model's variables hold its state (``jax_state_sync`` ran since the last step):
    ``JAXTrainer._jax_state_synced``."""
    return bool(model._jax_state_synced)


def set_jax_state_synced(model, synced: bool) -> None:
    """Say whether the model's variables hold its state (False: ``jax_state_sync`` writes the held state back):
    ``JAXTrainer._jax_state_synced``."""
    model._jax_state_synced = synced


# --- Keras 2 (tf_keras) -----------------------------------------------------------------------------------------


def create_legacy_optimizer_slots(optimizer, variables) -> None:
    """Create a legacy optimizer's slots, step counter and hyperparameters now (they are made at its first step):
    ``OptimizerV2._create_all_weights``, what tf_keras' own HDF5 loader calls for the same purpose."""
    optimizer._create_all_weights(variables)


def legacy_decayed_lr(optimizer, dtype) -> Any:
    """A legacy optimizer's learning rate at its current step (its schedule applied), as ``dtype``:
    ``OptimizerV2._decayed_lr``."""
    return optimizer._decayed_lr(dtype)


def tf_random_generators(layers) -> Iterator[Tuple[int, Any]]:
    """(index, ``tf.random.Generator``) of each of ``layers`` that draws from one (dropout, with
    ``enable_tf_random_generator``): ``Layer._random_generator`` (a ``backend.RandomGenerator``), created now by
    its ``_maybe_init``, and the generator it holds, ``_generator``."""
    import tensorflow as tf  # lazy: TensorFlow (a Keras 2 model's layers are TensorFlow's)

    for index, layer in enumerate(layers):
        rng = getattr(layer, "_random_generator", None)
        if rng is None or not hasattr(rng, "_maybe_init"):
            continue
        rng._maybe_init()
        if isinstance(getattr(rng, "_generator", None), tf.random.Generator):
            yield index, rng._generator
