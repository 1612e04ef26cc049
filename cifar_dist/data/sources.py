"""``DataSources``: what a data factory returns to be read record by record (grain's and Keras' own kinds of source).

A source is random access: ``len(source)`` and ``source[i]``, as grain's
``RandomAccessDataSource`` (and a grain ``MapDataset``) is; a record is an
``(image, label)`` pair or a ``{"image": ..., "label": ...}`` dict. A Keras
``PyDataset`` (``source[i]`` is batch i, ``(images, labels)``) is read batch by
batch. cifar_dist reads each split once, in order, into ``DataArrays``
(``read_sources``), so every engine trains on it as on CIFAR-10: engine=jax
keeps it on the device (or streams it from there), the TensorFlow engines
feed it through tf.data. A split that would take more than this process's
share of the memory (``host_memory_budget``: a third of the machine's, or of
its cgroup's limit, divided among the job's processes on this host, each of
which reads its own copy) is refused in one line before it is read; its
records are copied into one array, never stacked from a list (docs/data.md,
"Memory").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, List, Optional, Sequence

import numpy as np

from cifar_dist.data.arrays import DataArrays
from cifar_dist.data.batches import DataError
from cifar_dist.data.checks import empty_split


@dataclass(frozen=True)
class DataSources:
    """Random-access train and test sources of (image, label) records (module docstring)."""

    train: Any
    test: Any
    class_names: Sequence[str] = ()  # default: "0", "1", ...
    source: str = "sources from a data factory"


# What a data set in memory costs a process at its peak, as a multiple of its images (docs/data.md, "Memory"): the
# arrays once, plus one copy (sources held by the factory while they are read; engine=jax on the CPU, where the
# "device" the training set is copied to is this memory). A set may take 1 / (PEAK_COPIES + 1) of the memory: at
# the budget its peak is two thirds, the rest left to the framework, the model and the system.
PEAK_COPIES = 2


def host_memory_budget(processes_here: int = 1) -> int:
    """The bytes a data set read into memory may take in one of the ``processes_here`` processes of the job on
    this host: a third of the memory (``host_memory``: the machine's, or the cgroup's all of them share), divided
    among them, since each reads its own copy."""
    return host_memory() // (PEAK_COPIES + 1) // max(1, int(processes_here))


def budget_words(budget: int) -> str:
    """How a refusal names ``budget``: its size and what it is a share of."""
    return (
        f"the {budget / 2**30:.1f} GiB a process may hold (a third of this host's memory, shared by the job's "
        'processes on it: docs/data.md, "Memory")'
    )


def host_memory() -> int:
    """This process's memory: the machine's, or less where a cgroup limits it (a container, a Slurm job's
    ``--mem``), which the kernel enforces by killing the process."""
    return min([os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), *cgroup_limits()])


def cgroup_limits(root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")) -> List[int]:
    """The memory limits of this process's cgroup and of those above it (cgroup v2's ``memory.max``, v1's
    ``memory.limit_in_bytes``); none where there is no limit ("max") or no cgroup file system."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:  # "0::/path" (v2), "4:memory:/path" (v1), "1:name=systemd:/path" (neither)
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":  # v2: one hierarchy, at the root (or in unified/, beside v1's)
            bases, name = (root, root / "unified"), "memory.max"
        elif "memory" in controllers.split(","):
            bases, name = (root / "memory",), "memory.limit_in_bytes"
        else:
            continue
        for base in bases:
            limits += _limits_up(base, PurePosixPath(path).parts[1:], name)
    return limits


def _limits_up(base: Path, parts: Sequence[str], name: str) -> List[int]:
    """The numbers in the ``name`` files of the cgroup folders ``base/parts...`` and every folder above it."""
    found = []
    for depth in range(len(parts), -1, -1):
        try:
            text = base.joinpath(*parts[:depth], name).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            found.append(int(text))
    return found


def read_sources(sources: DataSources, where: str, budget: Optional[int] = None) -> DataArrays:
    """Both splits of ``sources`` read into memory, in order."""
    budget = host_memory_budget() if budget is None else budget
    x_train, y_train = read_split(sources.train, "train", where, budget)
    x_test, y_test = read_split(sources.test, "test", where, budget - x_train.nbytes)
    return DataArrays(x_train, y_train, x_test, y_test, tuple(sources.class_names), sources.source)


def read_split(source, split: str, where: str, budget: int):
    """(images, labels) of one source (the ``split`` one of ``where``): every record (or every batch of a
    PyDataset) copied, in order, into one array made when the first is read (no list of records stacked at the
    end: the split's images are in memory once, besides whatever the source itself holds)."""
    what = f"the {split} source of {where}"
    if not hasattr(source, "__len__") or not hasattr(source, "__getitem__"):
        raise DataError(
            f"{what} is a {type(source).__name__}, not a random-access source (len() and [i]); see docs/data.md"
        )
    batched = _is_py_dataset(source)
    count = len(source)
    if count == 0:
        raise DataError(f"{what} is empty; {empty_split(split)}")
    images, labels, filled = None, [], 0
    for index in range(count):
        image, label = _record(source[index], what, index)
        part = np.asarray(image) if batched else np.asarray(image)[None]
        if images is None:  # the whole split's array, made once: records are copied into it, never stacked
            _check_fits(part[0] if not batched else part, count, batched, what, budget)
            images = np.empty((count * len(part), *part.shape[1:]), part.dtype)
        _check_like(part, images, filled, what, index)
        images[filled : filled + len(part)] = part
        filled += len(part)
        labels.append(np.asarray(label).reshape(-1))
    return images[:filled], np.concatenate(labels)


def _check_like(part: np.ndarray, images: np.ndarray, filled: int, what: str, index: int) -> None:
    """A record (or a PyDataset's batch) of the first one's image shape and dtype, with room for it in ``images``
    (sized by the first: a PyDataset's batches may be shorter than the first, not longer)."""
    if part.shape[1:] != images.shape[1:] or part.dtype != images.dtype:
        raise DataError(
            f"{what} holds records of different shapes or dtypes (record 0: {images.shape[1:]} {images.dtype}, "
            f"record {index}: {part.shape[1:]} {part.dtype}); give every image one size and dtype"
        )
    if filled + len(part) > len(images):
        raise DataError(f"{what}: batch {index} holds more images than batch 0; give batches of one size")


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
            f"{needed / 2**30:.1f} GiB in all, more than {budget_words(budget)}; "
            "give uint8 images, or fewer or smaller ones"
        )
