"""airbench's lookahead: the weights pulled towards a slow moving average late in the run.

Every time Keras calls back (every ``trainer.steps_per_execution`` steps), the
slow copy moves towards the current weights and the weights are set to the
slow copy::

    slow += (1 - d) * (w - slow);  w = slow

with a decay that is 0 for most of the run and rises as (step / total)^3 to
``trainer.lookahead_decay`` (per 5 steps, airbench: 0.95^5) at the last step:
early training is untouched, the end of the run averages over its last
few hundred steps, as an EMA of the weights would, but with the average *being*
the model, so checkpoints, validation and the final test all see it and a
resumed run needs no extra state (the weights are the slow copy at every update).

Horovod: every rank holds the same trainable weights and applies the same
update at the same step, so the ranks stay identical without communication;
BatchNorm's moving statistics (rank-local) are averaged across ranks by
``batchnorm.AverageBatchNormStatistics`` as before.
"""

from __future__ import annotations

import numpy as np

from cifar_dist.common.keras_callback import Callback
from cifar_dist.common.keras_flavor import KERAS3, as_tf_variable, flavor_of

AIRBENCH_DECAY = 0.95**5  # airbench94: per 5 steps, at the end of the run
AIRBENCH_POWER = 3.0
STEPS_PER_DECAY = 5  # the decay is given per this many steps (airbench updates every 5)


def decay_at(step: int, total_steps: int, final_decay: float, steps_since_last: int) -> float:
    """The decay of one update that covers ``steps_since_last`` steps and ends at ``step``."""
    fraction = min(max(step / max(total_steps, 1), 0.0), 1.0)
    per_five = final_decay * fraction**AIRBENCH_POWER
    return per_five ** (steps_since_last / STEPS_PER_DECAY)


class Lookahead(Callback):
    """Keras callback: airbench's lookahead over every float weight of the model (BatchNorm statistics included).

    The slow copies are variables of the model's own Keras (``tf.Variable`` for Keras 2, ``keras.Variable`` for
    Keras 3, on whichever backend), updated by that backend's ops where the weights live (on a GPU, on the GPU)."""

    def __init__(self, total_steps: int, final_decay: float = AIRBENCH_DECAY):
        super().__init__()
        self.total_steps = int(total_steps)
        self.final_decay = float(final_decay)
        self._slow = []
        self._last_step = 0

    def on_train_begin(self, logs=None):
        # After restore and broadcast: the slow copy starts as the weights every rank holds now.
        model = self.model
        self._weights = [w for w in model.weights if _is_float(w)]
        self._last_step = int(np.asarray(model.optimizer.iterations))
        self._compiled = _compiled_update() if self._weights and _on_jax(self._weights[0]) else None
        if self._compiled is None:
            self._slow = [_copy(w) for w in self._weights]
            return
        # Keras 3 on JAX: the copies are the update's own output at decay 0 (0 * w + 1 * w: each weight's value, in
        # a buffer of its own), so the one program every update runs is compiled now, before the first epoch, as
        # the training step is (the loop placed the weights as every update sees them), and no copy program runs.
        weights = [w.value for w in self._weights]
        copies, _ = self._compiled(weights, weights, 0.0)
        self._slow = [_slow_variable(w, c) for w, c in zip(self._weights, copies)]

    def on_train_batch_end(self, batch, logs=None):
        model = self.model  # (Keras 3 on JAX: the weights written back first, read again before the next step)
        step = int(np.asarray(model.optimizer.iterations))
        if step <= self._last_step:
            return
        decay = decay_at(step, self.total_steps, self.final_decay, step - self._last_step)
        self._last_step = step
        if self._compiled is not None:  # Keras 3 on JAX: every weight in one compiled update, one dispatch
            slows, weights = self._compiled(*self._values(), decay)
            for variable, value in zip(self._slow + self._weights, slows + weights):
                variable.assign(value)
            return
        for slow, weight in zip(self._slow, self._weights):
            value = _value(weight)
            if decay == 0.0:  # most of the run: the slow copy just follows
                slow.assign(_copied(value))
                continue
            averaged = decay * _value(slow) + (1.0 - decay) * value
            slow.assign(averaged)
            weight.assign(_copied(averaged))

    def _values(self):
        """(slow copies, weights): their JAX arrays, as the compiled update takes them."""
        return [v.value for v in self._slow], [v.value for v in self._weights]


def _copy(weight):
    """A non-trainable variable of ``weight``'s Keras holding its current value."""
    if flavor_of(weight) == KERAS3:
        return _slow_variable(weight, _copied(weight.value))
    import tensorflow as tf  # lazy: TensorFlow (a Keras 2 model's)

    return tf.Variable(as_tf_variable(weight), trainable=False)


def _slow_variable(weight, value):
    """The slow copy of a Keras 3 ``weight``: a non-trainable variable holding ``value`` (a buffer of its own)."""
    import keras  # lazy: Keras 3 (the model's)

    return keras.Variable(value, trainable=False, name=f"lookahead_{weight.name}")


def _on_jax(variable) -> bool:
    """A Keras 3 variable on JAX's backend (whose updates compile into one program)."""
    if flavor_of(variable) != KERAS3:
        return False
    import keras  # lazy: Keras 3 (the model's)

    return keras.backend.backend() == "jax"


def _compiled_update():
    """``(slows, weights, decay) -> (new slows, new weights)``: the update of every weight as one JAX program
    (on a GPU one dispatch instead of three per weight). Its outputs are new buffers, each its own: the loop may
    donate the weights' to the next step without touching the slow copy."""
    import jax  # lazy: JAX (Keras 3's backend here)

    def update(slows, weights, decay):
        averaged = [decay * s + (1.0 - decay) * w for s, w in zip(slows, weights)]
        return averaged, list(averaged)

    return jax.jit(update)


def _copied(value):
    """A copy of a backend tensor: on JAX the training loop donates the weights' buffers to the next step, which
    would delete a slow copy sharing one (``Array has been deleted``)."""
    return value + 0 if not hasattr(value, "copy") else value.copy()


def _value(variable):
    """The backend tensor behind a variable of either Keras (Keras 3 keeps it as ``value``)."""
    return variable.value if flavor_of(variable) == KERAS3 else as_tf_variable(variable)


def _is_float(variable) -> bool:
    """A float variable of either Keras (Keras 3 variables name their dtype as a string, tf.Variables a DType)."""
    dtype = getattr(variable.dtype, "name", variable.dtype)
    return str(dtype).startswith(("float", "bfloat"))
