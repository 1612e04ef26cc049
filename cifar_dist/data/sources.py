"""``DataSources``: what a data factory returns to be read record by record (grain's and Keras' own kinds of source).

A source is random access: ``len(source)`` and ``source[i]``, as grain's
``RandomAccessDataSource`` (and a grain ``MapDataset``) is; a record is an
``(image, label)`` pair or a ``{"image": ..., "label": ...}`` dict. A Keras
``PyDataset`` (``source[i]`` is batch i, ``(images, labels)``) is read batch by
batch. cifar_dist reads each split once, in order, into ``DataArrays``
(``read_sources``), so every engine trains on it as on CIFAR-10: engine=jax
keeps it on the device (or streams it from there), the TensorFlow engines
feed it through tf.data. A split that would not fit in half of this machine's
memory is refused in one line before it is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from cifar_dist.data.arrays import DataArrays
from cifar_dist.data.batches import DataError, reason
from cifar_dist.data.checks import empty_split


@dataclass(frozen=True)
class DataSources:
    """Random-access train and test sources of (image, label) records (module docstring)."""

    train: Any
    test: Any
    class_names: Sequence[str] = ()  # default: "0", "1", ...
    source: str = "sources from a data factory"


def host_memory_budget() -> int:
    """The bytes a data set read into memory may take: half of this machine's memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def read_sources(sources: DataSources, where: str, budget: Optional[int] = None) -> DataArrays:
    """Both splits of ``sources`` read into memory, in order."""
    budget = host_memory_budget() if budget is None else budget
    x_train, y_train = read_split(sources.train, "train", where, budget)
    x_test, y_test = read_split(sources.test, "test", where, budget - x_train.nbytes)
    return DataArrays(x_train, y_train, x_test, y_test, tuple(sources.class_names), sources.source)


def read_split(source, split: str, where: str, budget: int):
    """(images, labels) of one source (the ``split`` one of ``where``): every record (or every batch of a
    PyDataset), stacked."""
    what = f"the {split} source of {where}"
    if not hasattr(source, "__len__") or not hasattr(source, "__getitem__"):
        raise DataError(
            f"{what} is a {type(source).__name__}, not a random-access source (len() and [i]); see docs/data.md"
        )
    batched = _is_py_dataset(source)
    count = len(source)
    if count == 0:
        raise DataError(f"{what} is empty; {empty_split(split)}")
    images, labels = [], []
    for index in range(count):
        image, label = _record(source[index], what, index)
        if index == 0:
            _check_fits(np.asarray(image), count, batched, what, budget)
        images.append(np.asarray(image))
        labels.append(np.asarray(label))
    join = np.concatenate if batched else np.stack
    try:
        return join(images), join(labels).reshape(-1)
    except ValueError as exc:
        raise DataError(
            f"{what} holds records of different shapes ({reason(exc)}); give every image one size"
        ) from None


def _is_py_dataset(source) -> bool:
    """Keras' PyDataset (indexed by batch), recognised by its class without importing Keras."""
    return any(klass.__name__ == "PyDataset" for klass in type(source).__mro__)


def _record(record, what: str, index: int):
    """(image, label) of one record: a pair, or a dict with "image" and "label"."""
    if isinstance(record, dict):
        if "image" not in record or "label" not in record:
            raise DataError(f"{what}: record {index} is a dict without 'image' and 'label' keys; give both")
        return record["image"], record["label"]
    if isinstance(record, (tuple, list)) and len(record) >= 2:
        return record[0], record[1]
    raise DataError(f"{what}: record {index} is a {type(record).__name__}, not (image, label); see docs/data.md")


def _check_fits(first: np.ndarray, count: int, batched: bool, what: str, budget: int) -> None:
    """Refuse, before reading it, a split whose images would take more than ``budget`` bytes (``count`` items,
    records or batches, each the size of the first)."""
    needed = first.nbytes * count
    if needed > budget:
        raise DataError(
            f"{what} holds {count} {'batches' if batched else 'records'} of {first.nbytes / 2**20:.1f} MiB, "
            f"{needed / 2**30:.1f} GiB in all, more than the {budget / 2**30:.1f} GiB it may take in memory; "
            "give uint8 images, or fewer or smaller ones"
        )
