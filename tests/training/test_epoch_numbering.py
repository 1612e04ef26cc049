"""One epoch numbering everywhere: 1-based, as Keras prints "Epoch 1/3" and checkpoint-001.h5 holds epoch 1.

training_log.csv, metrics.json's records and the plot's whole-epoch axis
agree; a run dir of an earlier version, whose CSV log is 0-based, is
renumbered when it resumes so the rows it appends continue it.
"""

import csv

import numpy as np
import pytest

import cifar_dist  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow loads)
from cifar_dist.training.artifacts import plot_learning_curves, trim_csv_log
from cifar_dist.training.callbacks import EpochCSVLogger


def epochs_in(path):
    with open(path, newline="") as f:
        return [row["epoch"] for row in csv.DictReader(f)]


def test_the_csv_log_numbers_epochs_from_1(tmp_path):
    path = tmp_path / "training_log.csv"
    logger = EpochCSVLogger(str(path))
    logger.set_model(None)
    logger.on_train_begin()
    for epoch in range(3):  # Keras' own epoch index, 0-based
        logger.on_epoch_end(epoch, {"loss": 1.0 / (epoch + 1)})
    logger.on_train_end()
    assert epochs_in(path) == ["1", "2", "3"]


class UnfetchableMetric:
    """What Keras 3 on JAX leaves in the logs when a metric's collective failed (another process died): a 0-d
    array that cannot be iterated, and whose value raises the collective's error when fetched."""

    def __iter__(self):
        raise TypeError("iteration over a 0-d array")

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("Gloo all-reduce failed: Connection closed by peer")


def test_a_metric_that_cannot_be_fetched_raises_its_own_error_not_the_csv_writers(tmp_path):
    logger = EpochCSVLogger(str(tmp_path / "training_log.csv"))
    logger.set_model(None)
    logger.on_train_begin()
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        logger.on_epoch_end(0, {"loss": UnfetchableMetric()})
    logger.on_epoch_end(1, {"loss": np.float32(0.5)})  # a value that fetches: written as a number
    logger.on_train_end()
    with open(tmp_path / "training_log.csv", newline="") as f:
        assert [row["loss"] for row in csv.DictReader(f)] == ["0.5"]


def test_resume_trims_a_1_based_log_to_the_checkpointed_epochs(tmp_path):
    path = tmp_path / "training_log.csv"
    path.write_text("epoch,loss\n1,0.9\n2,0.8\n3,0.7\n")  # epoch 3 logged, killed before its checkpoint
    trim_csv_log(path, 2)
    assert epochs_in(path) == ["1", "2"]


def test_an_earlier_versions_0_based_log_is_renumbered_on_resume(tmp_path):
    path = tmp_path / "training_log.csv"
    path.write_text("epoch,loss\n0,0.9\n1,0.8\n2,0.7\n")  # epochs 1-3 the old way; checkpoint-002.h5 is the newest
    trim_csv_log(path, 2)
    assert epochs_in(path) == ["1", "2"]
    with open(path, newline="") as f:
        assert [row["loss"] for row in csv.DictReader(f)] == ["0.9", "0.8"]


def test_the_learning_curves_have_whole_epoch_ticks(tmp_path, saved_figures):
    plot_learning_curves(
        [{"epoch": 1, "loss": 2.0, "accuracy": 0.2}, {"epoch": 2, "loss": 1.5, "accuracy": 0.3}],
        tmp_path / "curves.png",
    )
    (fig,) = saved_figures
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
