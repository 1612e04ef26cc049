"""Loading CIFAR-10 into numpy arrays: the packaged sample, a local copy, the cache, or a download.

``load_dataset(cfg.data)`` is the one entry point. ``data.name`` picks the
source:

- ``sample``: the real-image sample inside the package
  (``cifar_dist/data/sample/cifar-10-sample.tar.gz``, found through
  importlib.resources so an installed package works from any directory);
- ``cifar10``: ``data.path`` (the .tar.gz, a folder holding
  ``cifar-10-batches-py/``, or that folder itself), else the extracted copy in
  ``data.cache_dir``, else a checked download of ``data.url`` into the cache
  (see ``cache.py``).

Batch files are decoded by a restricted unpickler (``batches.py``); any
problem is a one-line ``DataError`` naming the file and the fix.
"""
from __future__ import annotations

import importlib.resources
import logging
from pathlib import Path

from cifar_dist.data.archive import load_folder, load_tarball, read_tar_members
from cifar_dist.data.batches import BATCH_DIR, MEMBERS, CifarArrays, DataError, assemble
from cifar_dist.data.cache import ARCHIVE_NAME, cached_folder, ensure_cached

__all__ = ["CifarArrays", "DataError", "load_dataset", "DATA_NAMES"]

log = logging.getLogger("cifar_dist.data")

DATA_NAMES = ("cifar10", "sample")
SAMPLE_NAME = "cifar-10-sample.tar.gz"


def load_dataset(data_cfg) -> CifarArrays:
    """The train and test arrays named by ``data_cfg`` (the ``data`` node of the config)."""
    name = str(data_cfg.name)
    if name == "sample":
        arrays = _load_sample()
    elif name == "cifar10":
        arrays = _load_cifar10(data_cfg)
    else:
        raise DataError(f"data.name={name!r} is not a data set; use one of: {', '.join(DATA_NAMES)} (e.g. data=sample)")
    log.info("CIFAR-10: %d train / %d test images from %s", len(arrays.x_train), len(arrays.x_test), arrays.source)
    return arrays


def _load_sample() -> CifarArrays:
    resource = importlib.resources.files(__name__).joinpath("sample").joinpath(SAMPLE_NAME)
    fix = "reinstall cifar_dist, or rebuild the sample with scripts/make_sample.py"
    try:
        handle = resource.open("rb")
    except OSError:
        raise DataError(f"the packaged sample {resource} is missing; {fix}") from None
    with handle:
        members = read_tar_members(handle, str(resource), fix)
    return assemble(members.get, lambda m: f"{resource}:{BATCH_DIR}/{m}", f"packaged sample {resource}", fix)


def _load_cifar10(data_cfg) -> CifarArrays:
    if data_cfg.path:
        return _load_path(Path(str(data_cfg.path)).expanduser())
    folder = cached_folder(data_cfg) or ensure_cached(data_cfg)
    return load_folder(folder, f"delete {folder} and run again to re-extract it")


def _load_path(path: Path) -> CifarArrays:
    """``data.path``: a tarball, a folder holding ``cifar-10-batches-py/`` (or the tarball), or the batches folder."""
    fix = f"point data.path at a good copy of {ARCHIVE_NAME} or of its {BATCH_DIR} folder"
    if path.is_file():
        return load_tarball(path, fix)
    if not path.is_dir():
        raise DataError(f"data.path={path} does not exist; {fix}, or set data.path=null to use data.cache_dir")
    if (path / BATCH_DIR).is_dir():
        return load_folder(path / BATCH_DIR, fix)
    if (path / ARCHIVE_NAME).is_file():
        return load_tarball(path / ARCHIVE_NAME, fix)
    if any((path / member).is_file() for member in MEMBERS):
        return load_folder(path, fix)
    raise DataError(f"data.path={path} holds neither {BATCH_DIR}/ nor {ARCHIVE_NAME} nor CIFAR batch files; {fix}")
