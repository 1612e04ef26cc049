"""The per-host cache of the real data set: one download and one extraction, however many ranks ask.

Every Horovod rank on a host calls ``load_dataset`` at the same moment. The
first to take an exclusive ``flock`` on ``<cache_dir>/.cifar-10.lock``
downloads and extracts; the others block on the lock and then find the
extracted folder. A finished copy is recognised by the folder's existence
alone (it appears by an atomic rename), so readers need no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import shutil
from pathlib import Path

from cifar_dist.data.archive import extract
from cifar_dist.data.batches import CIFAR10, DataError, Layout, reason
from cifar_dist.data.download import download, file_md5

log = logging.getLogger("cifar_dist.data")

ARCHIVE_NAME = CIFAR10.archive
LOCK_NAME = ".cifar-10.lock"


@contextlib.contextmanager
def host_lock(cache_dir: Path):
    """Exclusive lock shared by every process on this host that uses ``cache_dir``."""
    with open(cache_dir / LOCK_NAME, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_folder(data_cfg, layout: Layout = CIFAR10) -> Path | None:
    """The extracted folder in the cache when a previous run left one, without locking or downloading."""
    folder = Path(data_cfg.cache_dir).expanduser() / layout.folder
    return folder if folder.is_dir() else None


def ensure_cached(data_cfg, layout: Layout = CIFAR10) -> Path:
    """The extracted ``cifar-10-batches-py`` folder in ``data.cache_dir``, downloaded and extracted once if needed."""
    cache_dir = Path(data_cfg.cache_dir).expanduser()
    if not data_cfg.download and not (cache_dir / layout.archive).is_file():
        raise DataError(
            f"{layout.name} is not in data.cache_dir={cache_dir} and data.download=false; {layout.offline_hint}"
        )
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(
            f"cannot create data.cache_dir={cache_dir} ({reason(exc)}); set data.cache_dir to a writable folder"
        ) from None
    folder = cache_dir / layout.folder
    with host_lock(cache_dir):
        if folder.is_dir():  # another process finished while we waited
            log.info("using %s, prepared by another process", folder)
            return folder
        _remove_leftovers(cache_dir)
        archive = cache_dir / layout.archive
        fix = f"delete {archive} and run again to re-download, or {layout.offline_hint}"
        if archive.is_file():
            _check_cached_archive(archive, data_cfg, fix)
        else:
            download(
                data_cfg.url,
                archive,
                data_cfg.md5,
                int(data_cfg.size_bytes),
                float(data_cfg.download_timeout_s),
                layout.offline_hint,
            )
        return extract(archive, cache_dir, fix, layout)


def _check_cached_archive(archive: Path, data_cfg, fix: str) -> None:
    """A tarball someone put into the cache is extracted only if it is the one data.md5 names."""
    size = archive.stat().st_size
    if size != int(data_cfg.size_bytes) or file_md5(archive) != str(data_cfg.md5).lower():
        raise DataError(
            f"{archive} is not the expected archive (size or md5 differ from data.size_bytes/data.md5); {fix}"
        )


def _remove_leftovers(cache_dir: Path) -> None:
    """Temporary files of a download or extraction that crashed; safe to delete while holding the lock."""
    for stale in [*cache_dir.glob(".download-*"), *cache_dir.glob(".extract-*")]:
        log.info("removing leftover %s", stale)
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
