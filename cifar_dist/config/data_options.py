"""Schemas of every data option (cifar10, sample, cifar100, folder, custom), each registered here (``@config_option``).

Each is a ``DataConfig`` (augmentation, prefetch and the shuffle buffer
apply to every option) with the keys of its own:

- ``data=cifar100``: the CIFAR-100 python archive, ``data.label_mode`` fine
  (100 classes) or coarse (20 superclasses);
- ``data=folder data.path=DIR``: a class-per-subfolder image tree;
- ``data=custom data._target_=module.function``: the user's own tf.data factory.

The class count comes from the data; models are built with it (see
``training/trainer.py``), so there is no second setting to keep in step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional, Tuple, Type

from omegaconf import MISSING

from cifar_dist.config.options import config_option


class Placement(str, Enum):
    auto = "auto"
    device = "device"
    stream = "stream"


@dataclass
class AugmentConfig:
    # The seed's ImageDataGenerator(width_shift_range=0.1, height_shift_range=0.1,
    # horizontal_flip=True, fill_mode="nearest"), done on whole batches in tf.data.
    enabled: bool = True
    width_shift: float = 0.1
    height_shift: float = 0.1
    horizontal_flip: bool = True
    # airbench's alternating flips: each image gets a fixed random bit (from
    # the seed) and is flipped in the epochs whose parity matches it, so every
    # image is seen both ways in any two consecutive epochs. Needs horizontal_flip.
    alternating_flip: bool = False
    # Random whole-pixel translation by up to this many pixels each way with
    # reflected borders (airbench: 2). 0 = off.
    translate: int = 0
    # Cutout (DeVries & Taylor 2017): zero one random size x size square per image. 0 = off.
    cutout: int = 0


@config_option("data", "cifar10")
@dataclass
class DataConfig:
    """``data=cifar10``: the real CIFAR-10 python archive (50,000 train / 10,000 test
    images). Looked for in data.path (the .tar.gz, or a folder holding
    cifar-10-batches-py), then in data.cache_dir; otherwise downloaded from
    data.url, md5-checked."""

    # "cifar10": the real archive (data.path, then the cache, then a download);
    # "sample": the real-image sample that ships inside the package.
    name: str = "cifar10"
    path: Optional[str] = None
    cache_dir: str = "~/.cache/cifar_dist/datasets"
    url: str = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    md5: str = "c58f30108f718f92721af3b95e74349a"
    size_bytes: int = 170498071
    download: bool = True
    download_timeout_s: float = 60.0
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    shuffle_buffer: int = 0  # 0: the whole (per-rank) training set
    prefetch: int = -1  # -1: tf.data.AUTOTUNE
    # engine=jax: where the training images live. auto: on the device (uint8) when they take at most a quarter of
    # its memory (training/engines/jax_data.py), else streamed from the host one execution ahead; device: on the
    # device or a one-line refusal; stream: always from the host.
    placement: Placement = Placement.auto


@config_option("data", "sample")
@dataclass
class SampleDataConfig(DataConfig):
    """``data=sample``: real CIFAR-10 images that ship inside the package (4,068 train /
    1,017 test): the first 1,017 images of each of data_batch_1..4 and test_batch.
    Needs no network; accuracy on it is far below full-data accuracy."""

    name: str = "sample"


class LabelMode(str, Enum):
    fine = "fine"  # 100 classes
    coarse = "coarse"  # 20 superclasses


@config_option("data", "cifar100")
@dataclass
class Cifar100Config(DataConfig):
    """The real CIFAR-100 python archive (50,000 train / 10,000 test images):
    data.label_mode=fine (100 classes, default) or coarse (20 superclasses).
    Looked for in data.path (the .tar.gz, or a folder holding cifar-100-python),
    then in data.cache_dir; otherwise downloaded from data.url, md5-checked.
    Models get their class count from the data."""

    name: str = "cifar100"
    url: str = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    md5: str = "eb9058c3a382ffc7106e4002c42a8d85"
    size_bytes: int = 169001437
    label_mode: LabelMode = LabelMode.fine


class BadFiles(str, Enum):
    refuse = "refuse"  # one line naming an unreadable image file, before training
    skip = "skip"  # leave unreadable files out, counted in one warning line


@config_option("data", "folder")
@dataclass
class FolderDataConfig(DataConfig):
    """Your images, one sub-folder per class (docs/data.md):
    ``python -m cifar_dist data=folder data.path=DIR``. DIR/train/<class>/*.png|jpg
    and DIR/test/<class>/..., or one tree DIR/<class>/... split by val_fraction.
    Classes: sorted folder names. Every image is checked once before training
    (data.bad_files: refuse or skip unreadable ones), then read from disk as
    training goes, resized to image_size, sharded per rank and augmented like CIFAR-10."""

    name: str = "folder"
    path: Optional[str] = None
    image_size: int = 32  # every image is resized to image_size x image_size
    val_fraction: float = 0.2  # only for a single tree (no train/ and test/ folders)
    split_seed: int = 0  # which images of a single tree go to validation (fixed, not trainer.seed)
    # Every image is read once before training: an unreadable one (corrupt, a text file named .png) is
    # refused in one line naming it, or left out and counted (skip). Hidden files (._x.png) are never images.
    bad_files: BadFiles = BadFiles.refuse


@config_option("data", "custom")
@dataclass
class CustomDataConfig(DataConfig):
    """Your own tf.data factory (docs/data.md has the per-rank contract):
    ``python -m cifar_dist data=custom data._target_=mydata.make [+data.kwargs.k=v]``.
    A function returning cifar_dist.data.streams.DataStreams, called as
    _target_(seed=trainer.seed, **kwargs) on every rank; cifar_dist shards,
    shuffles, batches and augments it."""

    name: str = "custom"
    _target_: str = MISSING
    kwargs: Dict[str, Any] = field(default_factory=dict)


SCHEMAS: Dict[str, Type[DataConfig]] = {
    "cifar100": Cifar100Config,
    "folder": FolderDataConfig,
    "custom": CustomDataConfig,
}
ARCHIVES = ("cifar10", "cifar100")
# The keys every option inherits from DataConfig but only some read (the options named): where a CIFAR archive
# is and how it is fetched, and the shuffle buffer of streamed data (arrays in memory are shuffled whole).
# Any other key of an option's schema is read by it.
READ_BY: Dict[str, Tuple[str, ...]] = {
    "path": (*ARCHIVES, "folder"),
    **{key: ARCHIVES for key in ("cache_dir", "url", "md5", "size_bytes", "download", "download_timeout_s")},
    "shuffle_buffer": ("folder", "custom"),
}


def data_schema(name: Optional[str]) -> Type[DataConfig]:
    """The schema of the data option called ``name`` (DataConfig for cifar10 and sample)."""
    return SCHEMAS.get(str(name), DataConfig)


def ignored_settings(data: Any) -> List[Tuple[str, Any, Tuple[str, ...]]]:
    """(key, value, the options that read it) for each key of the ``data`` node that its option does not read
    (``READ_BY``) and that differs from the option's default: a setting that would change nothing."""
    name = str(data.get("name"))
    defaults = data_schema(name)()
    return [
        (key, data.get(key), readers)
        for key, readers in READ_BY.items()
        if name not in readers and key in data and data.get(key) != getattr(defaults, key)
    ]
