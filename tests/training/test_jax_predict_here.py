"""engine=jax's ``predict_here`` (the model check's scores, computed in this process alone): the model's outputs as
Keras' own ``predict`` gives them, from one compiled program, not one program per operation (on a GPU each eager
operation is a program of its own to load: ~60 for the speedrun's net before its first epoch). In a fresh process:
Keras on JAX."""

import json
import subprocess
import sys
import textwrap

import pytest

from helpers.cli import cli_env

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]

SCRIPT = textwrap.dedent(
    """
    import json, logging, os
    os.environ["KERAS_BACKEND"] = "jax"
    import jax, keras, numpy as np
    from cifar_dist.training.engines.jax import JaxEngine

    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, activation="gelu")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalMaxPooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(x))
    images = np.random.default_rng(0).normal(size=(6, 8, 8, 3)).astype("float32")
    expected = model.predict(images, verbose=0)

    compiled = []
    class Programs(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("Compiling "):
                compiled.append(record.getMessage().split(" with ")[0])
    logging.getLogger("jax").addHandler(Programs())
    jax.config.update("jax_log_compiles", True)
    scores = JaxEngine.predict_here(JaxEngine.__new__(JaxEngine), model, images)
    jax.config.update("jax_log_compiles", False)
    print(json.dumps({"close": bool(np.allclose(scores, expected, atol=1e-5)), "shape": list(scores.shape),
                      "programs": compiled}))
    """
)


def test_the_check_s_scores_are_keras_predict_s_from_one_compiled_program():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=cli_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["close"] and out["shape"] == [6, 5]
    assert len(out["programs"]) == 1, out["programs"]
