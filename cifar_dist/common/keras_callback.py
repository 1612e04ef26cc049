"""The base of cifar_dist's Keras callbacks: one class both Keras call, importing neither.

Keras 3's ``fit`` (and the JAX engine's loop, ``engines/jax_fit.py``) and
tf.keras's ``fit`` both drive callbacks through a ``CallbackList`` that calls
``set_model``, ``set_params`` and the ``on_*`` hooks, and asks two more
things: whether a batch hook is the default no-op (marked as both Keras'
``@default`` decorator marks theirs: keras_internals.py's ``mark_default_hook``;
a list whose callbacks have no batch hook of their own skips them, or
dispatches them off the training thread), and, tf.keras only, the private
``_implements_*_batch_hooks`` and ``_supports_tf_logs`` (keras_internals.py
lists them). Subclassing ``tf.keras.callbacks.Callback`` would
load TensorFlow in a run that trains on JAX alone (where it may not even be
installed); subclassing ``keras.callbacks.Callback`` would load Keras 3 in a
Keras 2 run. So the callbacks subclass this, which answers both.

``model``, as Keras 3's own ``Callback.model``: on JAX a model's variables
are not updated mid-epoch (the training state lives in the loop); reading
``self.model`` first writes the state back (``jax_state_sync``), so a
callback always sees the weights it would see after the step.
"""

from __future__ import annotations

from cifar_dist.common.keras_internals import is_default_hook, mark_default_hook


class Callback:
    """A Keras callback for either Keras (module docstring)."""

    _supports_tf_logs = False  # tf.keras: give this callback numpy logs, not tensors

    def __init__(self):
        self.params = {}
        self.validation_data = None
        self._model = None

    @property
    def model(self):
        sync = getattr(self._model, "jax_state_sync", None)
        if sync is not None:  # Keras 3 on JAX: the weights as of the last step, written back to the variables
            sync()
        return self._model

    @model.setter
    def model(self, model):
        self._model = model

    def set_model(self, model):
        self._model = model

    def set_params(self, params):
        self.params = params

    def _implements_train_batch_hooks(self) -> bool:
        return not (is_default_hook(self.on_batch_begin) and is_default_hook(self.on_batch_end)) or not (
            is_default_hook(self.on_train_batch_begin) and is_default_hook(self.on_train_batch_end)
        )

    def _implements_test_batch_hooks(self) -> bool:
        return not (is_default_hook(self.on_test_batch_begin) and is_default_hook(self.on_test_batch_end))

    def _implements_predict_batch_hooks(self) -> bool:
        return not (is_default_hook(self.on_predict_batch_begin) and is_default_hook(self.on_predict_batch_end))

    @mark_default_hook
    def on_batch_begin(self, batch, logs=None):
        pass

    @mark_default_hook
    def on_batch_end(self, batch, logs=None):
        pass

    @mark_default_hook
    def on_epoch_begin(self, epoch, logs=None):
        pass

    @mark_default_hook
    def on_epoch_end(self, epoch, logs=None):
        pass

    @mark_default_hook
    def on_train_batch_begin(self, batch, logs=None):
        pass

    @mark_default_hook
    def on_train_batch_end(self, batch, logs=None):
        pass

    @mark_default_hook
    def on_test_batch_begin(self, batch, logs=None):
        pass

    @mark_default_hook
    def on_test_batch_end(self, batch, logs=None):
        pass

    @mark_default_hook
    def on_predict_batch_begin(self, batch, logs=None):
        pass

    @mark_default_hook
    def on_predict_batch_end(self, batch, logs=None):
        pass

    @mark_default_hook
    def on_train_begin(self, logs=None):
        pass

    @mark_default_hook
    def on_train_end(self, logs=None):
        pass

    @mark_default_hook
    def on_test_begin(self, logs=None):
        pass

    @mark_default_hook
    def on_test_end(self, logs=None):
        pass

    @mark_default_hook
    def on_predict_begin(self, logs=None):
        pass

    @mark_default_hook
    def on_predict_end(self, logs=None):
        pass


def implements_batch_hooks(callback) -> bool:
    """Whether ``callback`` (any Keras' callback) has a training-batch hook of its own (not the default no-op)."""
    hooks = ("on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end")
    return any(not is_default_hook(getattr(callback, hook, None)) for hook in hooks if hasattr(callback, hook))
