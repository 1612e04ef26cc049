"""Reading CIFAR-10 batches out of a tarball or a folder, and extracting a tarball safely.

A tarball can name members ``../../.bashrc`` or ``/etc/cron.d/x``, or be
links and devices; ``tarfile.extractall`` would follow them. Extraction here
writes only regular files whose normalized names lie under
``cifar-10-batches-py/``, refuses the whole archive on any unsafe member, and
writes into a temporary folder that is renamed into place only when complete,
so a crash never leaves a half-extracted copy that looks usable.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import BinaryIO

from cifar_dist.common.atomic_files import replace_dir
from cifar_dist.data.batches import CIFAR10, CifarArrays, DataError, Layout, assemble, read_bounded, reason

log = logging.getLogger("cifar_dist.data")

# Errors a damaged or non-tar file raises while being read.
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


def _normalized(name: str) -> str | None:
    """A member name as a relative POSIX path, or None when it is absolute or climbs out with ``..``."""
    if name.startswith(("/", "\\")) or "\\" in name or (len(name) > 1 and name[1] == ":"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return posixpath.join(*parts) if parts else "."  # "./": the archive's root folder, harmless


def _batch_member(norm: str, layout: Layout = CIFAR10) -> str | None:
    """``data_batch_1`` for ``cifar-10-batches-py/data_batch_1`` (any file directly in the folder), else None."""
    folder, _, base = norm.partition("/")
    return base if folder == layout.folder and base and "/" not in base else None


def _check_safe(member: tarfile.TarInfo, where: str, layout: Layout = CIFAR10) -> str:
    """The member's normalized name; DataError for paths outside the archive and for anything but files and folders."""
    norm = _normalized(member.name)
    if norm is None:
        raise DataError(
            f"{where} contains an unsafe path {member.name!r}; refusing it, get a clean copy of {layout.archive}"
        )
    if not (member.isreg() or member.isdir()):
        raise DataError(
            f"{where} contains a link or special file {member.name!r}; "
            f"refusing it, get a clean copy of {layout.archive}"
        )
    return norm


def _batch_files(tar: tarfile.TarFile, where: str, layout: Layout = CIFAR10):
    """(member name, TarInfo) for each regular file directly in ``cifar-10-batches-py/``, in archive order.

    Every member is checked first, so one unsafe member refuses the whole
    archive whether it is being read or extracted.
    """
    for member in tar:
        norm = _check_safe(member, where, layout)
        base = _batch_member(norm, layout)
        if not member.isreg() or base is None:
            log.debug("skipping %s in %s", member.name, where)
            continue
        if member.size > layout.max_bytes:  # a decompression bomb, not data
            raise DataError(
                f"{where}: {member.name} is {member.size} bytes, far more than a {layout.name} batch; "
                f"get a clean copy of {layout.archive}"
            )
        yield base, member


def read_tar_members(fileobj: BinaryIO, where: str, fix: str, layout: Layout = CIFAR10) -> dict[str, bytes]:
    """The batch files of a CIFAR tarball, read in one forward pass without extracting anything."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
            for base, member in _batch_files(tar, where, layout):
                if base in layout.members:
                    found[base] = tar.extractfile(member).read()
    except _READ_ERRORS as exc:
        raise DataError(f"{where} is not a readable tar.gz ({reason(exc)}); {fix}") from None
    return found


def load_tarball(path: Path, fix: str, layout: Layout = CIFAR10) -> CifarArrays:
    """CifarArrays from a cifar-10-python.tar.gz-style archive on disk."""
    try:
        with open(path, "rb") as f:
            members = read_tar_members(f, str(path), fix, layout)
    except OSError as exc:
        raise DataError(f"cannot read {path} ({reason(exc)}); {fix}") from None
    return assemble(members.get, lambda m: f"{path}:{layout.folder}/{m}", str(path), fix, layout)


def load_folder(folder: Path, fix: str, layout: Layout = CIFAR10) -> CifarArrays:
    """CifarArrays from an extracted ``cifar-10-batches-py`` (or ``cifar-100-python``) folder."""

    def read(member: str) -> bytes | None:
        path = folder / member
        if not path.is_file():
            return None
        return read_bounded(path, fix, layout)

    return assemble(read, lambda m: str(folder / m), str(folder), fix, layout)


def extract(tar_path: Path, dest_dir: Path, fix: str, layout: Layout = CIFAR10) -> Path:
    """Extract ``cifar-10-batches-py/`` of ``tar_path`` into ``dest_dir``; returns the new folder.

    The caller holds the cache lock. An existing folder of that name is
    replaced only after the new one is complete.
    """
    target = dest_dir / layout.folder
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest_dir))
    try:
        out = staging / layout.folder
        out.mkdir()
        written = 0
        try:
            with tarfile.open(tar_path, mode="r|*") as tar:
                for base, member in _batch_files(tar, str(tar_path), layout):
                    with tar.extractfile(member) as src, open(out / base, "xb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                        dst.flush()
                        os.fsync(dst.fileno())
                    written += 1
        except _READ_ERRORS as exc:
            raise DataError(f"{tar_path} is not a readable tar.gz ({reason(exc)}); {fix}") from None
        if not written:
            raise DataError(f"{tar_path} holds no {layout.folder}/ files; {fix}")
        replace_dir(out, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("extracted %s to %s", tar_path, target)
    return target
