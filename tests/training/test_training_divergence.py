"""A diverging run stops with one line, and the console has no TensorFlow noise.

The console: TensorFlow's C++ start-up noise on a CPU machine ("Could not
find cuda drivers", E-level "Unable to register cuDNN factory", "failed call
to cuInit") is quiet by default (``TF_CPP_MIN_LOG_LEVEL`` set before
TensorFlow loads unless the user set it).
"""

import json
import math
import textwrap

import pytest

from helpers.cli import QUIET_RUN, cli_env, error_lines, one_error_line, run_cli, tiny_cifar

TF_NOISE = ("cuda drivers", "cuInit", "Unable to register", "CUDA error", "This TensorFlow binary is optimized")


def test_a_diverging_run_stops_with_one_line_and_the_console_has_no_tensorflow_noise(tmp_path):
    run_dir = tmp_path / "run"
    env = cli_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL")  # what a user's shell has: cifar_dist must quiet TensorFlow itself
    proc = run_cli(
        "data=sample",
        "optimizer=sgd",
        "optimizer.lr=1e30",
        "trainer.epochs=3",
        "trainer.verbose=0",
        f"hydra.run.dir={run_dir}",
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = error_lines(proc)
    assert len(errors) == 1 and "training diverged: the loss became nan" in errors[0], proc.stderr[-3000:]
    assert not list((run_dir / "saved_models").glob("*.h5"))
    if (run_dir / "metrics.json").exists():  # epochs before the diverged one, if any
        metrics = json.loads((run_dir / "metrics.json").read_text(), parse_constant=pytest.fail)
        assert metrics["complete"] is False
        assert all(math.isfinite(e["loss"]) for e in metrics["epochs"])
    console = proc.stdout + proc.stderr
    assert not [n for n in TF_NOISE if n in console], console[:3000]


DEAD_WEIGHTS = textwrap.dedent(
    """
    import keras
    import numpy as np


    @keras.saving.register_keras_serializable("deadlayers")
    class Poisoned(keras.layers.Layer):
        '''Passes its input through; in training, turns a weight of its own to NaN, which no output shows.'''

        def build(self, input_shape):
            self.poison = self.add_weight(shape=(3,), initializer="ones", trainable=False, name="poison")

        def call(self, inputs, training=False):
            if training:
                self.poison.assign(self.poison * float("nan"))
            return inputs


    def build(num_classes):
        inputs = keras.Input((32, 32, 3))
        x = keras.layers.Flatten()(Poisoned(name="dead")(inputs))
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
    """
)


@pytest.mark.jax_stack
@pytest.mark.both_stacks
@pytest.mark.parametrize("engine", ["engine=jax", "engine=auto"])
def test_dead_weights_behind_a_finite_loss_stop_the_run_before_anything_is_saved(tiny_data, tmp_path, engine):
    """Issue 47, item 4: a NaN weight the loss does not show (here a layer's own weight no output reads; in the
    reported run a ReLU net's) stops the run in one line naming the layer and the epoch, on every engine, before a
    checkpoint or the final model is written, and the run is not marked complete."""
    (tmp_path / "deadmodels.py").write_text(DEAD_WEIGHTS)
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "dead.yaml").write_text("_target_: deadmodels.build\n")
    run_dir = tmp_path / "run"
    proc = run_cli(
        "--config-dir", "conf", "model=dead", engine, *tiny_cifar(tiny_data), "trainer.epochs=2", *QUIET_RUN,
        f"hydra.run.dir={run_dir}", cwd=tmp_path, env=cli_env(PYTHONPATH=str(tmp_path)), timeout=600,
    )  # fmt: skip
    line = one_error_line(proc)
    assert "training diverged: layer dead's weight poison holds NaN after epoch 1" in line, line
    assert not list((run_dir / "checkpoints").glob("checkpoint-*")) and not (run_dir / "saved_models").exists()
    assert (
        not (run_dir / "metrics.json").exists()
        or json.loads((run_dir / "metrics.json").read_text())["complete"] is False
    )
