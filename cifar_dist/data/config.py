"""Schemas of the data options beyond CIFAR-10 and the sample, and how they are registered.

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


class LabelMode(str, Enum):
    fine = "fine"  # 100 classes
    coarse = "coarse"  # 20 superclasses


@dataclass
class Cifar100Config(DataConfig):
    # The real CIFAR-100 python archive (50,000 train / 10,000 test images):
    # data.path, then data.cache_dir, then a checked download of data.url.
    name: str = "cifar100"
    url: str = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    md5: str = "eb9058c3a382ffc7106e4002c42a8d85"
    size_bytes: int = 169001437
    label_mode: LabelMode = LabelMode.fine


@dataclass
class FolderDataConfig(DataConfig):
    # DIR/train/<class>/*.png|jpg and DIR/test/<class>/..., or DIR/<class>/...
    # split into train and validation by val_fraction. Classes: sorted folder names.
    name: str = "folder"
    path: Optional[str] = None
    image_size: int = 32  # every image is resized to image_size x image_size
    val_fraction: float = 0.2  # only for a single tree (no train/ and test/ folders)
    split_seed: int = 0  # which images of a single tree go to validation (fixed, not trainer.seed)


@dataclass
class CustomDataConfig(DataConfig):
    # A function returning cifar_dist.data.streams.DataStreams (see docs/data.md):
    # called as _target_(seed=trainer.seed, **kwargs) on every rank.
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


def register_data_schemas(cs) -> None:
    """Store ``<option>_schema`` in the data group for each option's YAML to extend."""
    for name, node in SCHEMAS.items():
        cs.store(group="data", name=f"{name}_schema", node=node)
