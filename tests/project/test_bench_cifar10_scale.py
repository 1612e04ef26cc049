"""The pieces of the GPU check's CIFAR-10-scale rows that run without a GPU: the CIFAR-10-sized set made from the
sample (read back by cifar_dist's own loader, the same bytes every time), and the reading of airbench94's printed
table into images/s (benchmarks/bench_airbench.py; airbench itself needs CUDA)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import bench_airbench, cifar10_sized
from helpers.cifar_fixtures import tiny_dataset


def test_the_cifar10_sized_set_is_cifar10s_format_made_the_same_every_time(tmp_path):
    first = cifar10_sized.write(tmp_path / "a", train=5000, test=300)  # past the sample's 4,068: a second cycle
    second = cifar10_sized.write(tmp_path / "b", train=5000, test=300)
    assert sorted(p.name for p in first.iterdir()) == [
        "batches.meta", "data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch",
    ]  # fmt: skip
    assert all((first / p.name).read_bytes() == p.read_bytes() for p in second.iterdir())
    data = tiny_dataset(tmp_path / "a")  # data=cifar10 data.path=<it>, as the benchmark trains on it
    assert data.x_train.shape == (5000, 32, 32, 3) and data.x_test.shape == (300, 32, 32, 3)
    assert len(np.unique(data.x_train.reshape(5000, -1), axis=0)) > 4900  # the second cycle shifted, not copies


AIRBENCH_PRINTED = """\
---------------------------------------------------------------------------
|  run     |  epoch  |  train_acc  |  val_acc  |  tta_val_acc  |  time_seconds  |
---------------------------------------------------------------------------
|       0  |      0  |     0.5015  |   0.6432  |               |        1.2500  |
|          |      1  |     0.6920  |   0.7511  |               |        1.5000  |
|          |      2  |     0.7701  |   0.8155  |               |        1.7500  |
|          |   eval  |     0.7701  |   0.8155  |       0.8350  |        1.9000  |
---------------------------------------------------------------------------
"""


def test_airbenchs_printed_table_is_read_into_its_epochs_times_and_images_per_second():
    rows = bench_airbench.table_rows(AIRBENCH_PRINTED)
    assert [r["epoch"] for r in rows] == ["0", "1", "2", "eval"]
    assert bench_airbench.epoch_seconds(rows) == pytest.approx([1.25, 0.25, 0.25])  # cumulative time_seconds
    result = bench_airbench.summary(rows, 50_000, wall_s=9.0)
    assert result["images_per_sec"] == pytest.approx(200_000) and result["first_epoch_s"] == pytest.approx(1.25)
    assert result["test_accuracy_tta"] == pytest.approx(0.835) and result["epochs"] == 3
