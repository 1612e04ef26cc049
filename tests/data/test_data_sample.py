"""The packaged real-image sample: what ``data=sample`` trains on."""

import pickle
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from cifar_dist.config.schema import DataConfig
from cifar_dist.data import CifarArrays, load_dataset
from cifar_dist.data.arrays import as_float
from helpers.paths import REPO, shared_path

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]  # also run on the current and jax stacks (Makefile)

SAMPLE = REPO / "cifar_dist" / "data" / "sample" / "cifar-10-sample.tar.gz"


@pytest.fixture
def subset() -> Path:
    """The real CIFAR-10 subset the sample was cut from (shared reference data; skipped, saying so, if absent)."""
    return shared_path("data", "cifar10-subset", "cifar-10-batches-py", folder=True)


@pytest.fixture(scope="module")
def sample() -> CifarArrays:
    return load_dataset(OmegaConf.structured(DataConfig(name="sample")))


def test_sample_has_the_documented_shapes_dtypes_labels_and_classes(sample):
    assert sample.x_train.shape == (4068, 32, 32, 3) and sample.x_test.shape == (1017, 32, 32, 3)
    assert sample.x_train.dtype == sample.x_test.dtype == np.uint8
    assert sample.y_train.shape == (4068,) and sample.y_test.shape == (1017,)
    assert sample.y_train.dtype == sample.y_test.dtype == np.int64
    for y in (sample.y_train, sample.y_test):
        assert y.min() >= 0 and y.max() < 10
        assert set(np.unique(y)) == set(range(10))
    assert sample.class_names == (
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    )
    assert "cifar-10-sample.tar.gz" in sample.source


def test_sample_loads_from_any_working_directory(tmp_path, monkeypatch, sample):
    monkeypatch.chdir(tmp_path)
    again = load_dataset(OmegaConf.create({"name": "sample"}))
    assert np.array_equal(again.x_test, sample.x_test)


def _trusted_batch(path: Path):
    # The shared subset is trusted local input, so a plain pickle.load is an independent reference decoder here.
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    return batch[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), np.asarray(batch[b"labels"])


def test_sample_pixels_and_labels_equal_the_shared_subset(sample, subset):
    train = [_trusted_batch(subset / f"data_batch_{i}") for i in range(1, 5)]
    x_test, y_test = _trusted_batch(subset / "test_batch")
    assert np.array_equal(sample.x_train, np.concatenate([x for x, _ in train]))
    assert np.array_equal(sample.y_train, np.concatenate([y for _, y in train]))
    assert np.array_equal(sample.x_test, x_test) and np.array_equal(sample.y_test, y_test)


def test_make_sample_rebuilds_the_committed_tarball_byte_for_byte(tmp_path, subset):
    import runpy

    out = tmp_path / "rebuilt.tar.gz"
    main = runpy.run_path(str(REPO / "scripts" / "make_sample.py"))["main"]
    assert main(["--source", str(subset), "--out", str(out)]) == 0
    assert out.read_bytes() == SAMPLE.read_bytes()
    assert SAMPLE.stat().st_size <= 16 * 2**20


def test_images_as_float_are_the_seeds_pixels_over_255_and_leave_the_uint8_ones_alone():
    """``as_float`` divides in place (one array, not two): the same float32 values as the seed's ``x / 255``."""
    pixels = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
    kept = pixels.copy()
    floats = as_float(pixels)
    assert floats.dtype == np.float32 and np.array_equal(pixels, kept)
    assert floats.tobytes() == (pixels.astype(np.float32) / 255.0).tobytes()
    assert as_float(floats) is not floats and as_float(floats).tobytes() == floats.tobytes()
