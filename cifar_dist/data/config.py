"""Schemas of the data options beyond CIFAR-10 and the sample, each registered where it is defined (``@config_option``).

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
from typing import Any, Dict, Optional, Type

from omegaconf import MISSING

from cifar_dist.config import DataConfig
from cifar_dist.options import config_option


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


@config_option("data", "folder")
@dataclass
class FolderDataConfig(DataConfig):
    """Your images, one sub-folder per class (docs/data.md):
    ``python -m cifar_dist data=folder data.path=DIR``. DIR/train/<class>/*.png|jpg
    and DIR/test/<class>/..., or one tree DIR/<class>/... split by val_fraction.
    Classes: sorted folder names. Images are read from disk as training goes,
    resized to image_size, sharded per rank and augmented like CIFAR-10."""

    name: str = "folder"
    path: Optional[str] = None
    image_size: int = 32  # every image is resized to image_size x image_size
    val_fraction: float = 0.2  # only for a single tree (no train/ and test/ folders)
    split_seed: int = 0  # which images of a single tree go to validation (fixed, not trainer.seed)


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


def data_schema(name: Optional[str]) -> Type[DataConfig]:
    """The schema of the data option called ``name`` (DataConfig for cifar10 and sample)."""
    return SCHEMAS.get(str(name), DataConfig)

