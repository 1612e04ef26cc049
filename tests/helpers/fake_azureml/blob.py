"""The Blob service operations azure-storage-blob uses for Azure ML's code
uploads, log links and output downloads: put (single shot or blocks + block
list), get (ranged), properties, metadata, list by prefix. Signed (SAS ``sig``)
or shared-key requests only."""

from __future__ import annotations

import datetime
import hashlib
import threading
from dataclasses import dataclass, field
from email.utils import format_datetime
from pathlib import Path
from typing import Dict, List, Optional, Tuple
from xml.sax.saxutils import escape


@dataclass
class Blob:
    data: bytes
    metadata: Dict[str, str] = field(default_factory=dict)
    modified: datetime.datetime = field(default_factory=lambda: datetime.datetime.now(datetime.timezone.utc))

    @property
    def etag(self) -> str:
        return (
            '"0x' + hashlib.md5(self.data + repr(sorted(self.metadata.items())).encode()).hexdigest()[:16].upper() + '"'
        )


class BlobStore:
    def __init__(self, account: str):
        self.account = account
        self.lock = threading.RLock()
        self.containers: Dict[str, Dict[str, Blob]] = {"azureml-blobstore": {}}
        self._blocks: Dict[Tuple[str, str], Dict[str, bytes]] = {}
        # Folders whose files are read live (a running job's logs): (container, prefix) -> folder.
        self.live: Dict[Tuple[str, str], Path] = {}

    def put(self, container: str, name: str, data: bytes, metadata: Optional[Dict[str, str]] = None) -> None:
        with self.lock:
            self.containers.setdefault(container, {})[name] = Blob(data, dict(metadata or {}))

    def get(self, container: str, name: str) -> Optional[Blob]:
        with self.lock:
            for (c, prefix), folder in self.live.items():
                if c == container and name.startswith(prefix):
                    path = folder / name[len(prefix) :]
                    return Blob(path.read_bytes()) if path.is_file() else None
            return self.containers.get(container, {}).get(name)

    def names(self, container: str, prefix: str = "") -> List[str]:
        with self.lock:
            return sorted(n for n in self.containers.get(container, {}) if n.startswith(prefix))

    def import_folder(self, container: str, prefix: str, folder: Path) -> int:
        """Copy a local folder's files in under ``prefix/``, as a job's mounted output is written back."""
        count = 0
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                self.put(container, f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())
                count += 1
        return count

    def export_prefix(self, container: str, prefix: str, folder: Path) -> int:
        """Write the blobs under ``prefix/`` into a local folder (what a job's mounted input shows)."""
        names = self.names(container, prefix.rstrip("/") + "/") or ([prefix] if self.get(container, prefix) else [])
        for name in names:
            rel = name[len(prefix) :].lstrip("/") or Path(name).name
            dest = folder / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(self.get(container, name).data)
        return len(names)


def _headers(blob: Blob) -> Dict[str, str]:
    out = {
        "ETag": blob.etag,
        "Last-Modified": format_datetime(blob.modified, usegmt=True),
        "x-ms-blob-type": "BlockBlob",
        "Accept-Ranges": "bytes",
        "Content-Type": "application/octet-stream",
        "x-ms-creation-time": format_datetime(blob.modified, usegmt=True),
    }
    out.update({f"x-ms-meta-{k}": v for k, v in blob.metadata.items()})
    return out


def _metadata(headers: Dict[str, str]) -> Dict[str, str]:
    return {k[len("x-ms-meta-") :]: v for k, v in headers.items() if k.startswith("x-ms-meta-")}


def _error(status: int, code: str) -> Tuple[int, Dict[str, str], bytes]:
    body = f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{code}</Message></Error>'
    return status, {"x-ms-error-code": code, "Content-Type": "application/xml"}, body.encode()


def handle_blob_request(
    store: BlobStore, method: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes
) -> Tuple[int, Dict[str, str], bytes]:
    if not (query.get("sig") or headers.get("authorization", "").startswith(f"SharedKey {store.account}:")):
        return _error(403, "AuthenticationFailed")
    container, _, name = path.lstrip("/").partition("/")
    with store.lock:
        if not name:
            return _container(store, method, container, query)
        if method == "PUT" and query.get("comp") == "block":
            store._blocks.setdefault((container, name), {})[query["blockid"]] = body
            return 201, {}, b""
        if method == "PUT" and query.get("comp") == "blocklist":
            import re

            ids = re.findall(r"<(?:Latest|Uncommitted|Committed)>([^<]+)</", body.decode())
            staged = store._blocks.pop((container, name), {})
            store.put(container, name, b"".join(staged[i] for i in ids), _metadata(headers))
            return 201, {"ETag": store.get(container, name).etag}, b""
        if method == "PUT" and query.get("comp") == "metadata":
            blob = store.get(container, name)
            if blob is None:
                return _error(404, "BlobNotFound")
            blob.metadata = _metadata(headers)
            return 200, {"ETag": blob.etag}, b""
        if method == "PUT":
            store.put(container, name, body, _metadata(headers))
            return 201, {"ETag": store.get(container, name).etag}, b""
        blob = store.get(container, name)
        if blob is None:
            return _error(404, "BlobNotFound")
        if method == "HEAD":
            return 200, {**_headers(blob), "Content-Length": str(len(blob.data))}, b""
        if method == "GET":
            return _ranged(blob, headers.get("x-ms-range") or headers.get("range"))
        if method == "DELETE":
            store.containers.get(container, {}).pop(name, None)
            return 202, {}, b""
    return _error(405, "UnsupportedHttpVerb")


def _ranged(blob: Blob, spec: Optional[str]) -> Tuple[int, Dict[str, str], bytes]:
    size = len(blob.data)
    if not spec:
        return 200, _headers(blob), blob.data
    start_s, _, end_s = spec.split("=", 1)[1].partition("-")
    start = int(start_s)
    end = min(int(end_s), size - 1) if end_s else size - 1
    if start >= size:
        return 416, {"Content-Range": f"bytes */{size}"}, b""
    return 206, {**_headers(blob), "Content-Range": f"bytes {start}-{end}/{size}"}, blob.data[start : end + 1]


def _container(
    store: BlobStore, method: str, container: str, query: Dict[str, str]
) -> Tuple[int, Dict[str, str], bytes]:
    if method == "PUT":
        if container in store.containers:
            return _error(409, "ContainerAlreadyExists")
        store.containers[container] = {}
        return 201, {}, b""
    if method == "GET" and query.get("comp") == "list":
        prefix = query.get("prefix", "")
        items = []
        for name in store.names(container, prefix):
            blob = store.get(container, name)
            meta = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in blob.metadata.items())
            items.append(
                f"<Blob><Name>{escape(name)}</Name><Properties><Content-Length>{len(blob.data)}</Content-Length>"
                f"<BlobType>BlockBlob</BlobType><Etag>{blob.etag}</Etag>"
                f"<Last-Modified>{format_datetime(blob.modified, usegmt=True)}</Last-Modified></Properties>"
                f"<Metadata>{meta}</Metadata></Blob>"
            )
        xml = (
            '<?xml version="1.0" encoding="utf-8"?>'
            f'<EnumerationResults ServiceEndpoint="https://{store.account}.blob/" ContainerName="{container}">'
            f"<Prefix>{escape(prefix)}</Prefix><Blobs>{''.join(items)}</Blobs><NextMarker /></EnumerationResults>"
        )
        return 200, {"Content-Type": "application/xml"}, xml.encode()
    if method in ("GET", "HEAD"):
        return (200, {}, b"") if container in store.containers else _error(404, "ContainerNotFound")
    return _error(405, "UnsupportedHttpVerb")
