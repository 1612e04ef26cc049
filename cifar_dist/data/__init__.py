"""Loading the configured data set: CIFAR-10/100 arrays, or tf.data streams of an image folder or a user factory.

``load_dataset(cfg.data, seed)`` is the one entry point. ``data.name`` picks the
source:

- ``sample``: the real-image sample inside the package
  (``cifar_dist/data/sample/cifar-10-sample.tar.gz``, found through
  importlib.resources so an installed package works from any directory);
- ``cifar10``: ``data.path`` (the .tar.gz, a folder holding
  ``cifar-10-batches-py/``, or that folder itself), else the extracted copy in
  ``data.cache_dir``, else a checked download of ``data.url`` into the cache
  (see ``cache.py``);
- ``cifar100``: the same for ``cifar-100-python.tar.gz`` (fine or coarse labels);
- ``folder``: a class-per-subfolder image tree, streamed, or decoded into memory (``folder.py``);
- ``custom``: the user's factory of arrays, sources or tf.data datasets (``custom.py``).

CIFAR sets come back as ``DataArrays`` (in memory; ``CifarArrays`` is its
old name), image folders and tf.data factories as ``DataStreams`` unless
``arrays`` asks for them in memory too (engine=jax); all give
``num_classes``, ``class_names``, ``source``, ``train_size`` and ``test_size``.

Batch files are decoded by a restricted unpickler (``batches.py``); any
problem is a one-line ``DataError`` naming the file and the fix.
"""

from __future__ import annotations

import importlib.resources
import logging
from pathlib import Path
from typing import List, Optional, Tuple

from cifar_dist.data.archive import load_folder, load_tarball, read_tar_members
from cifar_dist.data.arrays import DataArrays
from cifar_dist.data.batches import CIFAR10, CifarArrays, DataError, Layout, assemble, cifar100_layout
from cifar_dist.data.cache import cached_folder, ensure_cached
from cifar_dist.data.custom import load_custom
from cifar_dist.data.folder import load_folder_arrays, load_folder_streams
from cifar_dist.data.sources import DataSources, host_memory_budget

__all__ = ["CifarArrays", "DataArrays", "DataSources", "DataError", "load_dataset", "DATA_NAMES", "num_classes_of"]

log = logging.getLogger("cifar_dist.data")

DATA_NAMES = ("cifar10", "sample", "cifar100", "folder", "custom")
SAMPLE_NAME = "cifar-10-sample.tar.gz"


def load_dataset(data_cfg, seed: int = 0, arrays: bool = False, processes_here: int = 1):
    """The data set named by ``data_cfg`` (the ``data`` node of the config); ``seed`` goes to a custom factory.

    ``arrays``: in memory as ``DataArrays`` whatever the option (engine=jax, evaluation): an image folder decoded
    by Pillow, a tf.data factory's datasets read through; otherwise those two stay ``DataStreams`` (tf.data).
    ``processes_here``: the job's processes on this host, each reading its own copy, which share the memory a set
    read into memory may take (``sources.host_memory_budget``)."""
    name, budget = str(data_cfg.name), host_memory_budget(processes_here)
    if name == "sample":
        data = _load_sample()
    elif name in ("cifar10", "cifar100"):
        data = _load_cifar(data_cfg, _layout(data_cfg))
    elif name == "folder":
        data = load_folder_arrays(data_cfg, budget) if arrays else load_folder_streams(data_cfg)
    elif name == "custom":
        data = load_custom(data_cfg, seed, arrays, budget)
    else:
        raise DataError(f"data.name={name!r} is not a data set; use one of: {', '.join(DATA_NAMES)} (e.g. data=sample)")
    log.info(
        "%s: %d train / %d test images, %d classes, from %s",
        name,
        data.train_size,
        data.test_size,
        data.num_classes,
        data.source,
    )
    return data


def num_classes_of(data_cfg) -> int | None:
    """The class count of a CIFAR data option, known from the config alone (None for folder and custom)."""
    name = str(data_cfg.name)
    if name in ("cifar10", "sample"):
        return CIFAR10.num_classes
    if name == "cifar100":
        return _layout(data_cfg).num_classes
    return None


def _layout(data_cfg) -> Layout:
    if str(data_cfg.name) != "cifar100":
        return CIFAR10
    mode = data_cfg.label_mode
    return cifar100_layout(mode.value if hasattr(mode, "value") else str(mode))


def source_files(data_cfg) -> Optional[Tuple[Path, List[Path]]]:
    """(root, files): the files a data option's images and labels are read from, found the way loading finds them
    but without reading, downloading or importing anything; None when they cannot be named here (a factory's
    own reading, a copy not yet downloaded, a path this machine does not have). The resume fingerprint digests
    their bytes (``rundir/fingerprint.py``); ``root`` makes their names independent of where the data lies."""
    name = str(data_cfg.name)
    if name == "sample":
        resource = Path(str(importlib.resources.files(__name__).joinpath("sample").joinpath(SAMPLE_NAME)))
        return (resource, [resource]) if resource.is_file() else None  # one file: its name is not part of it
    if name == "folder":
        return None  # listed with its split, which reads every image once: fingerprint.folder_digest does it once
    if name == "custom":
        return None  # what a factory reads is its own business; its source is fingerprinted
    layout = _layout(data_cfg)
    if not data_cfg.path:
        folder = cached_folder(data_cfg, layout)
        return (folder, _members(folder, layout)) if folder is not None else None
    path = Path(str(data_cfg.path)).expanduser().absolute()
    if path.is_file():
        return path, [path]
    if (path / layout.folder).is_dir():
        return path / layout.folder, _members(path / layout.folder, layout)
    if (path / layout.archive).is_file():
        return path / layout.archive, [path / layout.archive]
    return (path, _members(path, layout)) if path.is_dir() else None


def _members(folder: Path, layout: Layout) -> List[Path]:
    return [folder / m for m in sorted(layout.members) if (folder / m).is_file()]


def _load_sample() -> CifarArrays:
    resource = importlib.resources.files(__name__).joinpath("sample").joinpath(SAMPLE_NAME)
    fix = "reinstall cifar_dist, or rebuild the sample with scripts/make_sample.py"
    try:
        handle = resource.open("rb")
    except OSError:
        raise DataError(f"the packaged sample {resource} is missing; {fix}") from None
    with handle:
        members = read_tar_members(handle, str(resource), fix)
    return assemble(members.get, lambda m: f"{resource}:{CIFAR10.folder}/{m}", f"packaged sample {resource}", fix)


def _load_cifar(data_cfg, layout: Layout) -> CifarArrays:
    if data_cfg.path:
        return _load_path(Path(str(data_cfg.path)).expanduser(), layout)
    folder = cached_folder(data_cfg, layout) or ensure_cached(data_cfg, layout)
    return load_folder(folder, f"delete {folder} and run again to re-extract it", layout)


def _load_path(path: Path, layout: Layout) -> CifarArrays:
    """``data.path``: a tarball, a folder holding ``cifar-10-batches-py/`` (or the tarball), or the batches folder."""
    archive, batch_dir = layout.archive, layout.folder
    fix = f"point data.path at a good copy of {archive} or of its {batch_dir} folder"
    if path.is_file():
        return load_tarball(path, fix, layout)
    if not path.is_dir():
        raise DataError(f"data.path={path} does not exist; {fix}, or set data.path=null to use data.cache_dir")
    if (path / batch_dir).is_dir():
        return load_folder(path / batch_dir, fix, layout)
    if (path / archive).is_file():
        return load_tarball(path / archive, fix, layout)
    if any((path / member).is_file() for member in layout.members):
        return load_folder(path, fix, layout)
    raise DataError(f"data.path={path} holds neither {batch_dir}/ nor {archive} nor {layout.name} batch files; {fix}")
