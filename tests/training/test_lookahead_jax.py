"""The lookahead's update on JAX (Keras 3): one compiled program for the whole run, compiled before the first epoch
(as the training step is), not inside it. The training loop places the model's state before the callbacks start
(``jax_fit._place``), so the weights and their slow copies are placed at ``on_train_begin`` as every update sees
them, and the program compiled there is the one every update runs. In fresh processes: Keras on JAX."""

import json
import subprocess
import sys
import textwrap

import pytest

from helpers.cli import REPO, cli_env

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]

SCRIPT = textwrap.dedent(
    """
    import json, logging, os
    os.environ["KERAS_BACKEND"] = "jax"
    import jax, keras, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec
    from cifar_dist.training.recipe.lookahead import Lookahead

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(keras.layers.Dense(5)(inputs)))
    model.compile(optimizer="sgd", loss="categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    replicated = NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:1]), ("batch",)), PartitionSpec())
    for w in model.weights:  # as jax_fit places the state before the callbacks start
        w.assign(jax.device_put(w.value, replicated))

    compiled = []
    class Programs(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("Compiling "):
                compiled.append(record.getMessage().split()[1])  # jit(name)
    logging.getLogger("jax").addHandler(Programs())
    jax.config.update("jax_log_compiles", True)
    callback = Lookahead(total_steps=40, final_decay=0.5)
    callback.set_model(model)
    before = [np.asarray(w.value) for w in model.weights]
    callback.on_train_begin()
    at_train_begin = list(compiled)
    unchanged = all(np.array_equal(b, np.asarray(w.value)) for b, w in zip(before, model.weights))
    copies_equal = all(np.array_equal(np.asarray(s.value), np.asarray(w.value))
                       for s, w in zip(callback._slow, callback._weights))
    own_buffers = all(s.value.unsafe_buffer_pointer() != w.value.unsafe_buffer_pointer()
                      for s, w in zip(callback._slow, callback._weights))
    for step in (10, 20, 30, 40):  # as the loop hands the weights back: trained, placed as before
        for w in model.weights:
            w.assign(jax.device_put(w.value + 0.25, replicated))
        model.optimizer.iterations.assign(step)
        callback.on_train_batch_end(step - 1)
    jax.config.update("jax_log_compiles", False)
    same = all(np.allclose(np.asarray(s.value), np.asarray(w.value)) for s, w in zip(callback._slow, callback._weights))
    print(json.dumps({"programs": compiled, "at_train_begin": at_train_begin, "unchanged": unchanged,
                      "copies_equal": copies_equal, "own_buffers": own_buffers, "weights_are_the_slow_copies": same}))
    """
)

TINY_BUILDER = """
def build(num_classes, keras, **settings):  # (the seed option's settings: unused)
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Flatten()(inputs)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
"""


def test_every_update_runs_the_one_program_compiled_at_train_begin():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=cli_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["unchanged"] and out["weights_are_the_slow_copies"]
    # the slow copies start as the weights' values, in buffers of their own (the loop donates the weights' buffers)
    assert out["copies_equal"] and out["own_buffers"], out
    # one program in all, the update's, compiled at train begin (no copy program per weight shape either)
    assert out["at_train_begin"] == ["jit(update)"], out
    assert out["programs"].count("jit(update)") == 1, out


def test_a_run_with_lookahead_compiles_its_update_before_the_first_epoch(tmp_path):
    """The whole loop (jax_fit places the state before on_train_begin): no program of the lookahead is compiled
    during an epoch."""
    (tmp_path / "tiny_builder.py").write_text(TINY_BUILDER)
    env = cli_env(PYTHONPATH=str(tmp_path), JAX_LOG_COMPILES="1", PYTHONUNBUFFERED="1")
    command = [
        sys.executable, "-m", "cifar_dist", "engine=jax", "data=sample", "model._target_=tiny_builder.build",
        "trainer.epochs=2", "trainer.lookahead_decay=0.77", "trainer.verbose=2", "trainer.plot=false",
        "trainer.tensorboard=false", "trainer.save_model=false", f"hydra.run.dir={tmp_path / 'run'}",
    ]  # fmt: skip
    # one stream, unbuffered: the compile log (stderr) and Keras' "Epoch 1/2" (stdout) in the order they happened
    proc = subprocess.run(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = proc.stdout.splitlines()
    first_epoch = next(i for i, line in enumerate(lines) if line.startswith("Epoch 1/2"))
    updates = [i for i, line in enumerate(lines) if "Compiling jit(update)" in line]
    assert len(updates) == 1 and updates[0] < first_epoch, [lines[i][:120] for i in updates]
