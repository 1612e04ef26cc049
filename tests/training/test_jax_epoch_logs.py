"""engine=jax's epoch logs (jax_fit._epoch_logs): Keras' own train_step computes the model's metric results inside
the compiled step, so the last step's logs are the epoch's metrics, and nothing more is computed on the host
(asked again, each metric op compiled on its first use: most of a cold first epoch on a CPU). A model with its own
``compute_metrics`` is asked for its metric results, as Keras' fit asks it. In a fresh process: Keras on JAX."""

import json
import subprocess
import sys
import textwrap

import pytest

from helpers.cli import cli_env

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]

SCRIPT = textwrap.dedent(
    """
    import json, os
    os.environ["KERAS_BACKEND"] = "jax"
    import jax, keras, numpy as np
    from cifar_dist.common import keras_internals
    from cifar_dist.training.engines import jax_fit

    class OwnMetrics(keras.Model):  # its step's logs are not its metric results
        def compute_metrics(self, x, y, y_pred, sample_weight=None):
            return {**super().compute_metrics(x, y, y_pred, sample_weight), "accuracy": 7.0}

    def after_one_step(cls):
        inputs = keras.Input((4,))
        model = cls(inputs, keras.layers.Dense(3, activation="softmax")(inputs))
        model.compile(optimizer="sgd", loss="categorical_crossentropy", metrics=["accuracy"])
        rng = np.random.default_rng(0)
        data = (rng.normal(size=(8, 4)).astype("float32"), np.eye(3, dtype="float32")[rng.integers(0, 3, 8)])
        keras_internals.symbolic_build(model, data)
        state = keras_internals.jax_state(model, purge_model_variables=False)
        logs, state = jax.jit(model.train_step)(state, data)
        jax_fit._keep(model, state)
        keras_internals.set_jax_state_synced(model, False)  # as jax_fit's epoch leaves it: the state is held
        model.jax_state_sync()
        asked = []
        results = model.get_metrics_result
        model.get_metrics_result = lambda: asked.append(1) or results()
        epoch = jax_fit._epoch_logs(model, logs)
        return {"epoch": epoch, "results": {k: float(v) for k, v in results().items()}, "asked": len(asked)}

    print(json.dumps({"keras": after_one_step(keras.Model), "own": after_one_step(OwnMetrics)}))
    """
)


def test_the_last_step_s_logs_are_the_epoch_s_metrics_unless_the_model_computes_its_own():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=cli_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    keras_model, own = out["keras"], out["own"]
    assert keras_model["asked"] == 0  # nothing computed on the host
    assert set(keras_model["epoch"]) == {"loss", "accuracy"}
    assert keras_model["epoch"] == pytest.approx(keras_model["results"], rel=1e-6)
    assert own["asked"] == 1 and own["epoch"] == own["results"] and own["epoch"]["accuracy"] != 7.0
