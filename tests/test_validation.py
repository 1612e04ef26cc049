"""Every bad value is one line before anything starts; a diverging run stops with one line; JSON stays JSON.

Also the console: TensorFlow's C++ start-up noise on a CPU machine ("Could
not find cuda drivers", E-level "Unable to register cuDNN factory", "failed
call to cuInit") is quiet by default (``TF_CPP_MIN_LOG_LEVEL`` set before
TensorFlow loads unless the user set it).
"""
import json
import math

import pytest

from conftest import cli_env, compose_cfg, run_cli
from cifar_dist.training.artifacts import disk_full, write_json
from cifar_dist.validation import ConfigError, validate

TF_NOISE = ("cuda drivers", "cuInit", "Unable to register", "CUDA error", "This TensorFlow binary is optimized")


def test_every_bad_value_is_listed_in_one_line():
    bad = {
        "model.num_classes=5": "model.num_classes=5 must be 10",
        "model.dense_units=0": "model.dense_units=0",
        "model.conv_dropout=1.5": "model.conv_dropout=1.5",
        "model.input_shape=[16,16,3]": "model.input_shape=[16, 16, 3]",
        "trainer.seed=-1": "trainer.seed=-1",
        "optimizer.lr=inf": "optimizer.lr=inf",
        "launcher=mpirun": "",
        "launcher.stall_shutdown_s=1": "launcher.stall_shutdown_s=1",
    }
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(*bad))
    message = str(err.value)
    assert "\n" not in message
    for fragment in bad.values():
        assert fragment in message
    with pytest.raises(ConfigError, match="model.num_classes=0"):
        validate(compose_cfg("model.num_classes=0"))


def test_evaluate_values_and_unset_environment_variables_are_one_line_before_anything_starts(tmp_path):
    for overrides, fragment in (
        (("task=evaluate",), "task=evaluate needs evaluate.model="),
        (("task=evaluate", "evaluate.model=x.h5", "evaluate.batch_size=0"), "evaluate.batch_size=0 must be >= 1"),
        (("data.path=${oc.env:CIFAR_DIST_TEST_UNSET}/cifar",), "data.path=${oc.env:CIFAR_DIST_TEST_UNSET}/cifar cannot be resolved"),
        (("launcher=mpirun", "launcher.stall_shutdown_s=1"), "launcher.stall_shutdown_s=1 must be 0 (off) or >= 10"),
    ):
        proc = run_cli(*overrides, f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cifar_dist: error: bad config:") and fragment in lines[0], proc.stderr


def test_a_batch_larger_than_the_data_is_one_line(tmp_path):
    proc = run_cli("data=sample", "trainer.batch_size=100000", "trainer.epochs=1", f"hydra.run.dir={tmp_path / 'run'}",
                   timeout=300)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "cifar_dist: error: trainer.batch_size=100000 is larger than the" in proc.stderr


def test_a_diverging_run_stops_with_one_line_and_the_console_has_no_tensorflow_noise(tmp_path):
    run_dir = tmp_path / "run"
    env = cli_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL")  # what a user's shell has: cifar_dist must quiet TensorFlow itself
    proc = run_cli("data=sample", "optimizer=sgd", "optimizer.lr=1e30", "trainer.epochs=3", "trainer.verbose=0",
                   f"hydra.run.dir={run_dir}", env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("cifar_dist: error:")]
    assert len(errors) == 1 and "training diverged: the loss became nan" in errors[0], proc.stderr[-3000:]
    assert not list((run_dir / "saved_models").glob("*.h5"))
    if (run_dir / "metrics.json").exists():  # epochs before the diverged one, if any
        metrics = json.loads((run_dir / "metrics.json").read_text(), parse_constant=pytest.fail)
        assert metrics["complete"] is False
        assert all(math.isfinite(e["loss"]) for e in metrics["epochs"])
    console = proc.stdout + proc.stderr
    assert not [n for n in TF_NOISE if n in console], console[:3000]


def test_metrics_json_is_strict_json(tmp_path):
    path = tmp_path / "metrics.json"
    write_json(path, {"loss": float("nan"), "epochs": [{"val_loss": float("inf")}], "ok": 1.5})
    assert json.loads(path.read_text(), parse_constant=pytest.fail) == {"loss": None, "epochs": [{"val_loss": None}], "ok": 1.5}


def test_the_disk_full_message_gives_advice_that_helps(tmp_path):
    message = str(disk_full(OSError(28, "No space left on device"), tmp_path / "checkpoint-003.h5"))
    assert "keep_checkpoints" not in message  # pruning happens after the new checkpoint is written
    assert "resume" in message and "checkpoint" in message
