"""Downloading the CIFAR-10 archive: streamed, md5- and size-checked, atomically renamed into place.

The bytes go to a temporary file next to the destination, are checked
against the expected md5 and size, fsynced, and only then renamed over the
destination name. A failed, truncated or tampered download is deleted and
never replaces (or half-overwrites) a good copy.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import urllib.error
import urllib.request
from pathlib import Path

from cifar_dist.common.atomic_files import atomic_path
from cifar_dist.data.batches import DataError, reason

log = logging.getLogger("cifar_dist.data")

_CHUNK = 1 << 20


def file_md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, dest: Path, md5: str, size_bytes: int, timeout_s: float, hint: str) -> Path:
    """Fetch ``url`` to ``dest``; DataError (and nothing written) unless it has exactly ``size_bytes`` and ``md5``.

    ``hint`` ends every error: what to do without the network (``Layout.offline_hint``).
    ``timeout_s`` bounds connecting and every read, so a stalled server
    fails instead of hanging; a slow but progressing one is allowed.
    """
    with atomic_path(dest) as tmp:  # published only when every check below passed
        with open(tmp, "wb") as out:
            got, digest = _stream(url, out, size_bytes, timeout_s, hint)
        if got != size_bytes:
            raise DataError(f"download of {url} was cut short ({got} of {size_bytes} bytes); retry, or {hint}")
        if digest != md5.lower():
            raise DataError(
                f"download of {url} has md5 {digest}, expected {md5}; the file or data.md5 is wrong: {hint}"
            )
    log.info("downloaded %s (%d bytes, md5 ok) to %s", url, size_bytes, dest)
    return dest


def _stream(url: str, out, size_bytes: int, timeout_s: float, hint: str) -> tuple[int, str]:
    """Copy the response body to ``out``; (bytes received, md5 hex). Stops early past ``size_bytes``."""
    digest = hashlib.md5()
    got = 0
    log.info("downloading %s (%d bytes)", url, size_bytes)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            while chunk := response.read(_CHUNK):
                got += len(chunk)
                if got > size_bytes:
                    raise DataError(
                        f"download of {url} is larger than data.size_bytes={size_bytes}; "
                        f"the URL or data.size_bytes is wrong: {hint}"
                    )
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        raise DataError(f"cannot download {url} (HTTP {exc.code} {exc.reason}); {hint}") from None
    except urllib.error.URLError as exc:
        raise DataError(f"cannot download {url} ({reason(exc.reason)}); {hint}") from None
    except http.client.IncompleteRead as exc:
        got += len(exc.partial)
        raise DataError(f"download of {url} was cut short ({got} of {size_bytes} bytes); retry, or {hint}") from None
    except (http.client.HTTPException, OSError, ValueError) as exc:  # timeouts, resets, bad URLs
        raise DataError(f"cannot download {url} ({reason(exc)}); {hint}") from None
    return got, digest.hexdigest()
