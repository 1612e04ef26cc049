"""A diverging run stops with one line, and the console has no TensorFlow noise.

The console: TensorFlow's C++ start-up noise on a CPU machine ("Could not
find cuda drivers", E-level "Unable to register cuDNN factory", "failed call
to cuInit") is quiet by default (``TF_CPP_MIN_LOG_LEVEL`` set before
TensorFlow loads unless the user set it).
"""

import json
import math

import pytest

from helpers.cli import cli_env, error_lines, run_cli

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
