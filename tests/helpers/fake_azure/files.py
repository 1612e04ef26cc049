"""The Azure File service calls the storage SDK makes: share and directory
create, file create + put-range, properties (HEAD), ranged GET (416 at
offset == size) and directory listing. State is an in-memory tree."""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Dict, List, Optional, Tuple
from xml.sax.saxutils import escape


@dataclass
class StoredFile:
    data: bytearray
    content_md5: Optional[str] = None  # base64, as sent in x-ms-content-md5
    version: int = 0

    @property
    def etag(self) -> str:
        return f'"0x{hashlib.md5(bytes(self.data)).hexdigest()[:16]}{self.version}"'


@dataclass
class FileStore:
    """Shares -> directories and files, keyed by their path inside the share."""

    shares: Dict[str, Dict[str, Optional[StoredFile]]] = field(default_factory=dict)  # None marks a directory

    def write(self, share: str, path: str, data: bytes) -> None:
        """Used by the fake 'nodes': write a whole file, creating its folders."""
        tree = self.shares.setdefault(share, {})
        parts = path.split("/")
        for i in range(1, len(parts)):
            tree.setdefault("/".join(parts[:i]), None)
        tree[path] = StoredFile(bytearray(data), base64.b64encode(hashlib.md5(data).digest()).decode())

    def append(self, share: str, path: str, data: bytes) -> None:
        tree = self.shares.setdefault(share, {})
        if tree.get(path) is None:
            self.write(share, path, data)
        else:
            tree[path].data.extend(data)
            tree[path].version += 1

    def read(self, share: str, path: str) -> Optional[bytes]:
        entry = self.shares.get(share, {}).get(path)
        return bytes(entry.data) if entry is not None else None

    def exists(self, share: str, path: str) -> bool:
        return path in self.shares.get(share, {})


def _error(status: int, code: str, message: str) -> Tuple[int, Dict[str, str], bytes]:
    body = (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>'
    )
    return status, {"x-ms-error-code": code, "Content-Type": "application/xml"}, body.encode()


def handle_file_request(
    store: FileStore, method: str, share: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes
) -> Tuple[int, Dict[str, str], bytes]:
    """One File service request on ``share``/``path`` (path may be empty: the share itself)."""
    restype, comp = query.get("restype"), query.get("comp")
    common = {"x-ms-version": "2025-05-05", "Date": formatdate(usegmt=True)}

    if restype == "share" and method == "PUT":
        if share in store.shares:
            return _error(409, "ShareAlreadyExists", "The specified share already exists.")
        store.shares[share] = {}
        return 201, {**common, "ETag": '"0x1"', "Last-Modified": formatdate(usegmt=True)}, b""

    tree = store.shares.get(share)
    if tree is None:
        return _error(404, "ShareNotFound", "The specified share does not exist.")
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    parent_ok = parent == "" or (parent in tree and tree[parent] is None)

    if restype == "directory" and method == "PUT":
        if path in tree:
            return _error(409, "ResourceAlreadyExists", "The specified resource already exists.")
        if not parent_ok:
            return _error(404, "ParentNotFound", "The specified parent path does not exist.")
        tree[path] = None
        return 201, {**common, "ETag": '"0x1"', "Last-Modified": formatdate(usegmt=True)}, b""

    if restype == "directory" and comp == "list" and method == "GET":
        if path and not (path in tree and tree[path] is None):
            return _error(404, "ResourceNotFound", "The specified resource does not exist.")
        return 200, {**common, "Content-Type": "application/xml"}, _listing(share, path, tree)

    if method == "PUT" and comp == "range":
        entry = tree.get(path)
        if entry is None:
            return _error(404, "ResourceNotFound", "The specified resource does not exist.")
        start, end = _parse_range(headers.get("x-ms-range") or headers.get("range") or "")
        if headers.get("x-ms-write", "update") == "update":
            entry.data[start : end + 1] = body
        entry.version += 1
        return 201, {**common, "ETag": entry.etag, "Last-Modified": formatdate(usegmt=True)}, b""

    if method == "PUT":  # create file
        if not parent_ok:
            return _error(404, "ParentNotFound", "The specified parent path does not exist.")
        size = int(headers.get("x-ms-content-length", "0"))
        tree[path] = StoredFile(bytearray(size), headers.get("x-ms-content-md5"))
        return 201, {**common, "ETag": tree[path].etag, "Last-Modified": formatdate(usegmt=True)}, b""

    entry = tree.get(path)
    if entry is None:
        return _error(404, "ResourceNotFound", "The specified resource does not exist.")
    props = {
        **common,
        "ETag": entry.etag,
        "Last-Modified": formatdate(usegmt=True),
        "x-ms-type": "File",
        "Content-Type": "application/octet-stream",
    }
    if entry.content_md5:
        props["Content-MD5"] = entry.content_md5
    size = len(entry.data)
    if method == "HEAD":
        return 200, {**props, "Content-Length": str(size)}, b""
    if method == "GET":
        ask = headers.get("x-ms-range") or headers.get("range")
        if not ask:
            return 200, props, bytes(entry.data)
        start, end = _parse_range(ask)
        if start >= size:
            status, hdrs, err = _error(
                416, "InvalidRange", "The range specified is invalid for the current size of the resource."
            )
            return status, {**hdrs, "Content-Range": f"bytes */{size}"}, err
        end = min(end if end is not None else size - 1, size - 1)
        return 206, {**props, "Content-Range": f"bytes {start}-{end}/{size}"}, bytes(entry.data[start : end + 1])
    return _error(400, "UnsupportedHttpVerb", f"{method} is not supported here")


def _parse_range(value: str) -> Tuple[int, Optional[int]]:
    match = re.match(r"bytes=(\d+)-(\d*)", value)
    if not match:
        return 0, None
    return int(match.group(1)), int(match.group(2)) if match.group(2) else None


def _listing(share: str, path: str, tree: Dict[str, Optional[StoredFile]]) -> bytes:
    prefix = f"{path}/" if path else ""
    entries: List[str] = []
    for key in sorted(tree):
        if not key.startswith(prefix) or "/" in key[len(prefix) :] or key == path:
            continue
        name = escape(key[len(prefix) :])
        entry = tree[key]
        if entry is None:
            entries.append(f"<Directory><Name>{name}</Name><Properties /></Directory>")
        else:
            entries.append(
                f"<File><Name>{name}</Name><Properties><Content-Length>{len(entry.data)}</Content-Length></Properties></File>"
            )
    xml = (
        '<?xml version="1.0" encoding="utf-8"?>'
        f'<EnumerationResults ServiceEndpoint="https://127.0.0.1/" ShareName="{escape(share)}" '
        f'DirectoryPath="{escape(path)}">'
        f"<Entries>{''.join(entries)}</Entries><NextMarker /></EnumerationResults>"
    )
    return xml.encode()
