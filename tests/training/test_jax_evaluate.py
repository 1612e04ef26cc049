"""engine=jax's evaluation (``jax_fit.evaluate``): Keras' own ``evaluate`` numbers for every shape of set (shorter
than a batch, whole batches only, a short last batch, several chunks), and one compiled program for a set of up to
``EVAL_CHUNK_BATCHES`` batches, its short batch included (the speedrun's validation and final test each traced,
lowered and loaded two programs before: the full batches' and the short batch's). In a fresh process: Keras on
JAX."""

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
    from types import SimpleNamespace
    os.environ["KERAS_BACKEND"] = "jax"
    import jax, keras, numpy as np
    from cifar_dist.training.engines import jax_fit

    jax_fit.EVAL_CHUNK_BATCHES = 2  # several chunks from a small set
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 3))
    x = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
    x = keras.layers.BatchNormalization()(keras.layers.Flatten()(x))
    model = keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(x))
    model.compile(loss="categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.default_rng(0)

    compiled = []
    class Programs(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("Compiling jit(batches)"):
                compiled.append(record.getMessage()[:22])
    logging.getLogger("jax").addHandler(Programs())
    jax.config.update("jax_log_compiles", True)
    result = {}
    for n in (5, 16, 19, 45):  # batch 8: shorter than a batch; 2 batches; 2 and a short one; 3 chunks, short last
        images = rng.integers(0, 256, (n, 6, 6, 3), dtype=np.uint8)
        labels = rng.integers(0, 5, n)
        eval_set = SimpleNamespace(images=images, labels=labels, batch_size=8, num_classes=5)
        compiled.clear()
        ours = jax_fit.evaluate(model, eval_set)
        programs = len(compiled)
        keras_own = model.evaluate(images.astype("float32") / 255.0, keras.utils.to_categorical(labels, 5),
                                   batch_size=8, verbose=0, return_dict=True)
        result[n] = {"ours": ours, "keras": {k: float(v) for k, v in keras_own.items()}, "programs": programs}
    print(json.dumps(result))
    """
)


def test_every_shape_of_set_scores_as_keras_evaluate_one_program_a_chunk():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=cli_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for n, seen in out.items():
        assert seen["ours"]["accuracy"] == seen["keras"]["accuracy"], (n, seen)
        assert seen["ours"]["loss"] == pytest.approx(seen["keras"]["loss"], rel=1e-6), (n, seen)
    # one program for a one-chunk set, short batch or not; a set of several chunks: the full chunks' and the last's
    assert [out[n]["programs"] for n in ("5", "16", "19", "45")] == [1, 1, 1, 2], out
