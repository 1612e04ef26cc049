"""trainer.validate_every: validation after every k-th epoch and the last (issue 24).

The default (1) validating after every epoch is asserted by tests/e2e/test_train_e2e.py
(every epoch record has val_loss and val_accuracy).
"""

import csv

import pytest

from cifar_dist.config.validation import ConfigError, validate
from cifar_dist.training.trainer import validation_epochs
from helpers.cli import assert_ok, compose_cfg, read_metrics, run_cli, tiny_cifar


@pytest.mark.parametrize(
    "every, epochs, expected",
    [
        (1, 5, 1),  # Keras' own every-epoch value: the seed's fit() call unchanged
        (2, 3, [2, 3]),
        (2, 4, [2, 4]),
        (3, 7, [3, 6, 7]),
        (0, 4, [4]),
        (9, 4, [4]),
    ],
)
def test_validation_epochs_are_every_kth_and_the_last(every, epochs, expected):
    assert validation_epochs(every, epochs) == expected


def test_a_negative_validate_every_is_one_line():
    with pytest.raises(ConfigError, match=r"trainer.validate_every=-1 must be >= 0"):
        validate(compose_cfg("trainer.validate_every=-1"))


def test_speedrun_validates_only_at_the_end_and_the_default_every_epoch():
    assert compose_cfg("experiment=speedrun").trainer.validate_every == 0
    assert compose_cfg().trainer.validate_every == 1


def test_validate_every_2_over_3_epochs_validates_after_epochs_2_and_3(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        "debug=fast",
        *tiny_cifar(tiny_data),  # what is asserted is when it validates, not what it learns
        "trainer.epochs=3",
        "trainer.validate_every=2",
        "trainer.verbose=0",
        f"hydra.run.dir={run_dir}",
        timeout=600,
    )
    assert_ok(proc)
    m = read_metrics(run_dir)
    assert [e["epoch"] for e in m["epochs"]] == [1, 2, 3]
    assert [e["epoch"] for e in m["epochs"] if "val_accuracy" in e and "val_loss" in e] == [2, 3]
    assert all("loss" in e and "epoch_seconds" in e for e in m["epochs"])
    assert m["complete"] and m["test"]["samples"] == 64  # all of tiny_data's test images
    # The last validation is the final test's plain score (same weights, same images).
    assert m["epochs"][-1]["val_accuracy"] == pytest.approx(m["test"]["accuracy"], abs=2e-3)
    with open(run_dir / "training_log.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["epoch"], r["val_accuracy"] != "NA") for r in rows] == [("1", False), ("2", True), ("3", True)]
    assert set(rows[0]) == {"epoch", "loss", "accuracy", "val_loss", "val_accuracy", "epoch_seconds", "images_per_sec"}
    assert (run_dir / "learning_curves.png").stat().st_size > 10_000
