"""The Azure file share the job mounts: what the tutorial did with
``az storage share/directory create`` and ``az storage file upload/download``.

Uploads are skipped when the share already holds the same bytes (compared by
the Content-MD5 the upload stored), so re-running a launch re-sends nothing
that did not change. Retries of 429/5xx/timeouts are the storage SDK's own
retry policy, configured from the launcher settings.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterator, List, Optional

from cifar_dist.common.atomic_files import atomic_path
from cifar_dist.launchers.batchai.config import Secret

log = logging.getLogger(__name__)


def md5_of(data: bytes) -> bytes:
    return hashlib.md5(data, usedforsecurity=False).digest()


class FileShare:
    """One share of one storage account, authenticated with the account key."""

    def __init__(self, account_url: str, account_name: str, key: Secret, share: str, **client_kwargs: Any):
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.credentials import AzureNamedKeyCredential

        # lazy: the azure extra (not installed for the other launchers)
        from azure.storage.fileshare import ShareClient

        self.share_name = share
        self._client = ShareClient(
            account_url,
            share,
            credential=AzureNamedKeyCredential(account_name, key.reveal()),
            **client_kwargs,
        )
        self._made_dirs: set = set()

    def ensure_share(self) -> None:
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceExistsError

        try:
            self._client.create_share()
            log.info("created file share %s", self.share_name)
        except ResourceExistsError:
            pass

    def ensure_dir(self, path: str) -> None:
        """Create ``path`` and its parents (az storage directory create, one level at a time)."""
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceExistsError

        parts = PurePosixPath(path).parts
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub in self._made_dirs:
                continue
            try:
                self._client.get_directory_client(sub).create_directory()
            except ResourceExistsError:
                pass
            self._made_dirs.add(sub)

    def upload(self, remote: str, data: bytes) -> bool:
        """Upload unless the share already holds these bytes; True when uploaded."""
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceNotFoundError

        # lazy: the azure extra (not installed for the other launchers)
        from azure.storage.fileshare import ContentSettings

        digest = md5_of(data)
        file_client = self._client.get_file_client(remote)
        try:
            props = file_client.get_file_properties()
            stored = props.content_settings.content_md5
            if props.size == len(data) and stored is not None and bytes(stored) == digest:
                log.debug("unchanged on the share, not uploaded: %s", remote)
                return False
        except ResourceNotFoundError:
            pass
        self.ensure_dir(str(PurePosixPath(remote).parent))
        file_client.upload_file(data, content_settings=ContentSettings(content_md5=bytearray(digest)))
        log.info("uploaded %s (%d bytes) to the share", remote, len(data))
        return True

    def walk(self, remote_dir: str) -> Iterator[str]:
        """Paths of every file below ``remote_dir`` (relative to it)."""
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceNotFoundError

        pending: List[str] = [""]
        while pending:
            rel = pending.pop()
            directory = self._client.get_directory_client(f"{remote_dir}/{rel}".rstrip("/"))
            try:
                entries = list(directory.list_directories_and_files())
            except ResourceNotFoundError:
                continue
            for entry in entries:
                child = f"{rel}/{entry['name']}".lstrip("/")
                if entry.get("is_directory"):
                    pending.append(child)
                else:
                    yield child

    def download_tree(self, remote_dir: str, local_dir: Path, skip_prefixes: tuple = ()) -> List[str]:
        """Copy every file below ``remote_dir`` into ``local_dir`` (files already
        there with the same size are kept); returns what was downloaded."""
        fetched = []
        for rel in sorted(self.walk(remote_dir)):
            if rel.startswith(skip_prefixes):
                continue
            file_client = self._client.get_file_client(f"{remote_dir}/{rel}")
            target = local_dir / rel
            props = file_client.get_file_properties()
            if target.is_file() and target.stat().st_size == props.size:
                continue
            with atomic_path(target) as tmp, open(tmp, "wb") as fh:  # never a half-downloaded model
                file_client.download_file().readinto(fh)
            fetched.append(rel)
        return fetched

    def exists(self, remote: str) -> bool:
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self._client.get_file_client(remote).get_file_properties()
            return True
        except ResourceNotFoundError:
            return False


def read_from(download_url: str, offset: int, **client_kwargs: Any) -> Optional[bytes]:
    """Bytes of a file from ``offset`` on, through a SAS URL (listOutputFiles'
    downloadUrl). b"" when nothing new (the service answers 416 at offset ==
    size); None when the URL has expired (403) or the file is gone (404)."""
    # lazy: the azure extra (not installed for the other launchers)
    from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

    # lazy: the azure extra (not installed for the other launchers)
    from azure.storage.fileshare import ShareFileClient

    client = ShareFileClient.from_file_url(download_url, **client_kwargs)
    try:
        return client.download_file(offset=offset).readall()
    except ResourceNotFoundError:
        return None
    except HttpResponseError as exc:
        if exc.status_code == 416:
            return b""
        if exc.status_code == 403:
            return None
        raise


def storage_client_kwargs(conf: Any) -> Dict[str, Any]:
    """Transport/retry settings for the storage clients (the storage SDK's own
    ExponentialRetry, which also retries 408/429/5xx and timeouts)."""
    # lazy: the azure extra (not installed for the other launchers)
    from azure.storage.fileshare import ExponentialRetry

    return {
        "retry_policy": ExponentialRetry(
            initial_backoff=conf.retry_backoff_factor,
            increment_base=2,
            retry_total=conf.retry_total,
            random_jitter_range=min(3, conf.retry_backoff_factor),
        ),
        "connection_timeout": conf.connection_timeout_s,
        "read_timeout": conf.read_timeout_s,
    }
