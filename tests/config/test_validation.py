"""Validation of the config: every bad value is one line before anything starts.

A diverging run: tests/training/test_training_divergence.py. Strict JSON and the disk-full
message: tests/common/test_durable.py.
"""

import pytest

from cifar_dist.config.validation import ConfigError, validate
from helpers.cli import compose_cfg, run_cli


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
        (
            ("data.path=${oc.env:CIFAR_DIST_TEST_UNSET}/cifar",),
            "data.path=${oc.env:CIFAR_DIST_TEST_UNSET}/cifar cannot be resolved",
        ),
        (("launcher=mpirun", "launcher.stall_shutdown_s=1"), "launcher.stall_shutdown_s=1 must be 0 (off) or >= 10"),
    ):
        proc = run_cli(*overrides, f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cifar_dist: error: bad config:") and fragment in lines[0], (
            proc.stderr
        )


def test_a_batch_larger_than_the_data_is_one_line(tmp_path):
    proc = run_cli(
        "data=sample", "trainer.batch_size=100000", "trainer.epochs=1", f"hydra.run.dir={tmp_path / 'run'}", timeout=300
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "cifar_dist: error: trainer.batch_size=100000 is larger than the" in proc.stderr
