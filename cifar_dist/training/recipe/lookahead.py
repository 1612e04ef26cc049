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
import tensorflow as tf

from cifar_dist.common.keras_flavor import as_tf_variable

AIRBENCH_DECAY = 0.95**5  # airbench94: per 5 steps, at the end of the run
AIRBENCH_POWER = 3.0
STEPS_PER_DECAY = 5  # the decay is given per this many steps (airbench updates every 5)


def decay_at(step: int, total_steps: int, final_decay: float, steps_since_last: int) -> float:
    """The decay of one update that covers ``steps_since_last`` steps and ends at ``step``."""
    fraction = min(max(step / max(total_steps, 1), 0.0), 1.0)
    per_five = final_decay * fraction**AIRBENCH_POWER
    return per_five ** (steps_since_last / STEPS_PER_DECAY)


class Lookahead(tf.keras.callbacks.Callback):
    """Keras callback: airbench's lookahead over every float weight of the model (BatchNorm statistics included)."""

    def __init__(self, total_steps: int, final_decay: float = AIRBENCH_DECAY):
        super().__init__()
        self.total_steps = int(total_steps)
        self.final_decay = float(final_decay)
        self._slow = []
        self._last_step = 0

    def on_train_begin(self, logs=None):
        # After restore and broadcast: the slow copy starts as the weights every rank holds now.
        self._weights = [w for w in self.model.weights if _is_float(w)]
        self._slow = [tf.Variable(as_tf_variable(w), trainable=False) for w in self._weights]
        self._last_step = int(np.asarray(self.model.optimizer.iterations))

    def on_train_batch_end(self, batch, logs=None):
        if hasattr(self.model, "jax_state_sync"):  # Keras 3 on JAX keeps the weights off the model mid-epoch
            self.model.jax_state_sync()  # (and reads them back before the next step: our assignments count)
        step = int(np.asarray(self.model.optimizer.iterations))
        if step <= self._last_step:
            return
        decay = decay_at(step, self.total_steps, self.final_decay, step - self._last_step)
        self._last_step = step
        for slow, weight in zip(self._slow, self._weights):
            if decay == 0.0:  # most of the run: the slow copy just follows
                slow.assign(as_tf_variable(weight))
                continue
            slow.assign(decay * slow + (1.0 - decay) * as_tf_variable(weight))
            weight.assign(slow)


def _is_float(variable) -> bool:
    """A float variable of either Keras (Keras 3 variables name their dtype as a string)."""
    return tf.as_dtype(variable.dtype).is_floating
