"""The data options beyond CIFAR-10 (CIFAR-100, image folders, tf.data factories), read without training.

The end-to-end runs (training, mpirun, task=evaluate) are in tests/e2e/test_data_own_e2e.py.
"""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
from omegaconf import OmegaConf

from cifar_dist.config.data_options import Cifar100Config, CustomDataConfig, FolderDataConfig
from cifar_dist.config.schema import AugmentConfig
from cifar_dist.data import CifarArrays, DataError, load_dataset
from helpers.cifar_fixtures import (
    CLASS_NAMES,
    cifar100_labels,
    cifar100_tarball,
    data_cfg,
    sample_arrays,
    write_png_tree,
)

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)

_cfg = data_cfg


@pytest.fixture(scope="module")
def sample():
    return sample_arrays(per_batch=60)


@pytest.fixture(scope="module")
def tree(sample, tmp_path_factory):
    x, y, test = sample
    return write_png_tree(tmp_path_factory.mktemp("tree"), {"train": (x, y), "test": test})


# --- CIFAR-100 -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, classes, pick", [("fine", 100, 0), ("coarse", 20, 1)])
def test_cifar100_reads_fine_or_coarse_labels_through_the_cifar_reader(tmp_path, sample, mode, classes, pick):
    archive = cifar100_tarball(tmp_path / "cifar-100-python.tar.gz", per_batch=60)
    data = load_dataset(_cfg(Cifar100Config, path=str(archive), label_mode=mode))
    x, y, (x_test, y_test) = sample
    assert isinstance(data, CifarArrays) and data.num_classes == classes and len(data.class_names) == classes
    np.testing.assert_array_equal(data.x_train, x)
    np.testing.assert_array_equal(data.y_train, cifar100_labels(y)[pick])
    np.testing.assert_array_equal(data.y_test, cifar100_labels(y_test)[pick])
    assert (
        data.class_names[:2] == ("airplane_0", "airplane_1")
        and data.class_names[-1] == f"truck_{9 if mode == 'fine' else 1}"
    )
    # data.path as a folder holding the archive reads the same
    folder = load_dataset(_cfg(Cifar100Config, path=str(tmp_path), label_mode=mode))
    np.testing.assert_array_equal(folder.y_train, data.y_train)


def test_cifar100_config_names_the_real_archive():
    cfg = OmegaConf.structured(Cifar100Config)
    assert cfg.url == "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    assert cfg.md5 == "eb9058c3a382ffc7106e4002c42a8d85" and cfg.size_bytes == 169001437


def test_cifar100_offline_without_a_copy_says_what_to_do(tmp_path):
    with pytest.raises(DataError, match=r"^CIFAR-100 is not in data.cache_dir=.*data.download=false"):
        load_dataset(_cfg(Cifar100Config, cache_dir=str(tmp_path), download=False))


def test_a_cifar10_archive_given_as_cifar100_is_refused_in_one_line(tmp_path):
    from helpers.cifar_fixtures import batch_files, random_batches, tar_bytes

    (tmp_path / "c10.tar.gz").write_bytes(tar_bytes(batch_files(*random_batches())))
    with pytest.raises(DataError) as err:
        load_dataset(_cfg(Cifar100Config, path=str(tmp_path / "c10.tar.gz")))
    assert "\n" not in str(err.value) and "cifar-100-python/meta is missing" in str(err.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["data=cifar100", "model.num_classes=10"],
            r"model.num_classes=10 must be 100 \(data=cifar100 has 100 classes",
        ),
        (["data=cifar100", "data.label_mode=coarse", "model.num_classes=100"], "model.num_classes=100 must be 20"),
        (["data=folder", "data.path=x", "model.num_classes=1"], "model.num_classes=1 must be >= 2"),
    ],
)
def test_a_model_num_classes_that_disagrees_with_the_data_is_refused(overrides, message):
    from hydra import compose, initialize_config_module

    from cifar_dist.all_options import register_configs
    from cifar_dist.config.validation import ConfigError, validate

    register_configs()
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with pytest.raises(ConfigError, match=message):
        validate(cfg)


def test_the_trainer_builds_models_with_the_datas_class_count():
    from cifar_dist.config.validation import ConfigError
    from cifar_dist.training.model_setup import model_kwargs

    data = type("D", (), {"num_classes": 7, "source": "image folder x"})()
    assert model_kwargs(OmegaConf.create({"num_classes": None}), data) == {"num_classes": 7}
    assert model_kwargs(OmegaConf.create({"num_classes": 7}), data) == {"num_classes": 7}
    with pytest.raises(ConfigError, match=r"^model.num_classes=10 but image folder x has 7 classes; leave"):
        model_kwargs(OmegaConf.create({"num_classes": 10}), data)


# --- image folders -----------------------------------------------------------------------------------------------


def test_folder_images_decode_to_the_pickles_pixels(tree, sample):
    x, y, (x_test, y_test) = sample
    data = load_dataset(_cfg(FolderDataConfig, path=str(tree)))
    assert data.class_names == CLASS_NAMES and data.train_size == len(x) and data.test_size == len(x_test)
    images, labels = data.arrays("train")
    # the tree is written class by class; the pickles' images in that order, scaled as the pipeline scales them
    order = np.lexsort((np.arange(len(y)), y))
    np.testing.assert_array_equal(labels, y[order])
    np.testing.assert_array_equal(images, x[order].astype(np.float32) / 255.0)


def test_folder_images_are_resized_to_image_size(tree):
    data = load_dataset(_cfg(FolderDataConfig, path=str(tree), image_size=48))
    images, _ = data.arrays("test")
    assert images.shape[1:] == (48, 48, 3) and images.dtype == np.float32 and 0 <= images.min() and images.max() <= 1


def test_a_single_tree_is_split_by_val_fraction_the_same_way_every_time(tmp_path, sample):
    x, y, _ = sample
    root = write_png_tree(tmp_path / "one", {"": (x, y)})
    a = load_dataset(_cfg(FolderDataConfig, path=str(root), val_fraction=0.25))
    b = load_dataset(_cfg(FolderDataConfig, path=str(root), val_fraction=0.25))
    assert a.train_size + a.test_size == len(x) and a.test_size == sum(round(0.25 * n) for n in np.bincount(y))
    np.testing.assert_array_equal(a.arrays("test")[0], b.arrays("test")[0])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: None, r"^data.path=.*/tree is not a folder; point it at DIR"),
        (lambda root: root.mkdir(), r"^.*/tree has no class folders; put each class's images in"),
        (
            lambda root: ((root / "train" / "cat").mkdir(parents=True), (root / "test" / "cat").mkdir(parents=True)),
            r"^class folder .*/train/cat holds no images",
        ),
        (lambda root: (root / "train").mkdir(parents=True), r"has only one of train/ and test/"),
    ],
)
def test_unusable_folders_give_one_line(tmp_path, make, message):
    root = tmp_path / "tree"
    make(root)
    with pytest.raises(DataError, match=message) as err:
        load_dataset(_cfg(FolderDataConfig, path=str(root)))
    assert "\n" not in str(err.value)


def test_train_and_test_with_different_classes_are_refused(tmp_path, sample):
    x, y, (x_test, y_test) = sample
    root = write_png_tree(tmp_path / "tree", {"train": (x, y), "test": (x_test, y_test)})
    (root / "test" / "truck").rename(root / "test" / "lorry")
    with pytest.raises(DataError, match=r"^.*/train and .*/test have different class folders \(lorry, truck\)"):
        load_dataset(_cfg(FolderDataConfig, path=str(root)))


def test_folder_needs_a_path():
    with pytest.raises(DataError, match=r"^data=folder needs data.path=DIR"):
        load_dataset(_cfg(FolderDataConfig))


def test_streamed_shards_are_disjoint_cover_the_set_and_repeat_per_seed(tree):
    from cifar_dist.data.streams import streamed_train

    data = load_dataset(_cfg(FolderDataConfig, path=str(tree)))
    off = OmegaConf.structured(AugmentConfig(enabled=False))

    def epoch(rank, seed=3):
        s = streamed_train(
            data, batch_size=8, rank=rank, size=2, shard=True, seed=seed, initial_epoch=0, epochs=1, augment=off
        )
        return np.concatenate([x.numpy() for x, _ in s.dataset]).reshape(-1, 32 * 32 * 3), s.steps_per_epoch

    (r0, steps0), (r1, steps1) = epoch(0), epoch(1)
    assert steps0 == steps1 == data.train_size // 2 // 8
    seen = {row.tobytes() for row in np.concatenate([r0, r1])}
    assert len(seen) == len(r0) + len(r1)  # no image on both ranks
    np.testing.assert_array_equal(epoch(0)[0], r0)  # the same seed: the same batches
    assert not np.array_equal(epoch(0, seed=4)[0], r0)


# --- tf.data factories -------------------------------------------------------------------------------------------

FACTORY = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    from cifar_dist.data.streams import DataStreams

    def make(seed, n=40):
        rng = np.random.default_rng(seed)
        labels = rng.integers(0, 4, n)
        images = rng.random((n, 32, 32, 3), dtype=np.float32)
        ds = lambda: tf.data.Dataset.from_tensor_slices((images, labels))
        return DataStreams(train=ds().filter(lambda x, y: True), test=ds(), num_classes=4,
                           class_names=["a", "b", "c", "d"], train_size=n)  # filter: a size TensorFlow cannot know

    def wrong(seed):
        return {"train": None}
""")


@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    (tmp_path / "myfactory.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "myfactory"
    sys.modules.pop("myfactory", None)


def test_a_factory_is_called_with_the_seed_and_its_kwargs(factory_module):
    data = load_dataset(_cfg(CustomDataConfig, _target_=f"{factory_module}.make", kwargs={"n": 30}), seed=5)
    assert data.num_classes == 4 and data.train_size == 30 and data.test_size == 30  # train stated (filter)
    assert data.source == "tf.data factory myfactory.make"
    again = load_dataset(_cfg(CustomDataConfig, _target_=f"{factory_module}.make", kwargs={"n": 30}), seed=5)
    np.testing.assert_array_equal(data.arrays("test")[0], again.arrays("test")[0])


@pytest.mark.parametrize(
    "target, message",
    [
        (
            "nosuchmodule.make",
            r"^data._target_=nosuchmodule.make cannot be imported: no module named 'nosuchmodule'; put its module on "
            "PYTHONPATH",
        ),
        (
            "myfactory.wrong",
            r"^data._target_=myfactory.wrong returned dict, not cifar_dist.data.DataArrays, DataSources",
        ),
    ],
)
def test_a_bad_factory_gives_one_line(factory_module, target, message):
    with pytest.raises(DataError, match=message):
        load_dataset(_cfg(CustomDataConfig, _target_=target))


def test_streamed_eval_covers_every_test_image_once_over_the_ranks(factory_module):
    from cifar_dist.data.streams import streamed_eval

    data = load_dataset(_cfg(CustomDataConfig, _target_=f"{factory_module}.make", kwargs={"n": 13}))
    parts = [streamed_eval(data, batch_size=4, rank=r, size=3, equal_shards=False) for r in range(3)]
    assert [p.samples for p in parts] == [5, 4, 4]
    rows = np.concatenate([x.numpy() for p in parts for x, _ in p.dataset])
    assert len({r.tobytes() for r in rows}) == 13
    equal = [streamed_eval(data, batch_size=4, rank=r, size=3, equal_shards=True) for r in range(3)]
    assert [p.samples for p in equal] == [4, 4, 4] and [p.steps for p in equal] == [1, 1, 1]


def test_a_model_that_does_not_take_the_datas_images_is_refused_in_one_line(tree):
    from cifar_dist.config.validation import ConfigError
    from cifar_dist.models.checks import check_input

    data = load_dataset(_cfg(FolderDataConfig, path=str(tree), image_size=48))
    assert data.image_shape == (48, 48, 3)
    model = type("M", (), {"input_shape": (None, 32, 32, 3)})()
    with pytest.raises(
        ConfigError,
        match=r"^the model takes \(32, 32, 3\) images but image folder .* gives \(48, 48, 3\); set "
        r"data.image_size=32 \(data=folder\), or use a model built for \(48, 48, 3\) images",
    ):
        check_input(model, data)
    check_input(model, load_dataset(_cfg(FolderDataConfig, path=str(tree))))
