"""One local HTTPS server answering what azure-ai-ml sends, recording every
request so tests can assert what the real SDK did, with injectable faults
(429/503 + Retry-After) and a bearer-token check.

    Host <account>.blob.<anything>  -> blob.BlobStore (the workspace's storage; SAS or key)
    /discovery                      -> the workspace's service URLs
    /subscriptions/..., /history/... -> workspace.AzureMLState (bearer token)

Reach it directly at ``url`` (ARM, run history) and, for the blob host names,
through ``proxy.url`` (an HTTP CONNECT proxy: tests set HTTPS_PROXY to it).
"""
from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import parse_qsl, unquote, urlsplit

from fake_azure.certs import make_self_signed

from .blob import BlobStore, handle_blob_request
from .proxy import ConnectProxy
from .workspace import AzureMLState


@dataclass
class Recorded:
    method: str
    host: str
    path: str
    query: Dict[str, str]
    headers: Dict[str, str]
    body: bytes
    at: float
    status: int = 0

    @property
    def raw(self) -> str:
        """Everything the client sent, as text (for leak checks)."""
        head = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return f"{self.method} {self.host}{self.path}?{self.query}\n{head}\n\n{self.body.decode('utf-8', 'replace')}"


@dataclass
class Fault:
    """Answer ``status`` (with Retry-After) to the next ``times`` requests that match."""

    match: Callable[[str, str], bool]
    status: int
    times: int
    retry_after: str = "1"
    hits: int = 0


@dataclass
class FakeAzureML:
    account: str = "fakeacct"
    token: str = "fake-aml-token"
    storage_suffix: str = "localhost"  # the custom cloud's storage endpoint: <account>.blob.localhost
    node_root: Optional[Path] = None  # run job commands for real below this folder
    requests: List[Recorded] = field(default_factory=list)
    faults: List[Fault] = field(default_factory=list)

    def __post_init__(self):
        self.lock = threading.RLock()
        self.blobs = BlobStore(self.account)
        self._server: Optional[ThreadingHTTPServer] = None
        self.proxy: Optional[ConnectProxy] = None
        self.state: Optional[AzureMLState] = None

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def blob_host(self) -> str:
        return f"{self.account}.blob.{self.storage_suffix}"

    def start(self, cert_dir: Path) -> "FakeAzureML":
        cert, key = make_self_signed(cert_dir, dns_names=[self.blob_host])
        self.ca_bundle = cert
        fake = self

        class Handler(_Handler):
            azure = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.proxy = ConnectProxy(("127.0.0.1", self._server.server_address[1])).start()
        self.state = AzureMLState(self.blobs, lambda: self.url, f"https://{self.blob_host}", self.node_root)
        return self

    def stop(self) -> None:
        with self.lock:
            if self.state is not None:
                self.state.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self.proxy is not None:
            self.proxy.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    # --- queries for tests ----------------------------------------------------------------

    def calls(self, method: Optional[str] = None, contains: str = "") -> List[Recorded]:
        with self.lock:
            return [r for r in self.requests if (method is None or r.method == method) and contains in r.path]

    def job_creates(self) -> List[Recorded]:
        return [r for r in self.calls("PUT", "/jobs/") if r.status in (200, 201)]

    def jobs(self):
        with self.lock:
            return list(self.state.jobs.values())

    # --- dispatch --------------------------------------------------------------------------

    def dispatch(self, method: str, host: str, raw_path: str, headers: Dict[str, str], body: bytes):
        split = urlsplit(raw_path)
        path = unquote(split.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        record = Recorded(method, host, path, query, headers, body, time.monotonic())
        with self.lock:
            self.requests.append(record)
            for fault in self.faults:
                if fault.hits < fault.times and fault.match(method, path):
                    fault.hits += 1
                    record.status = fault.status
                    code = "TooManyRequests" if fault.status == 429 else "ServiceUnavailable"
                    return fault.status, {"Retry-After": fault.retry_after, "Content-Type": "application/json"}, json.dumps(
                        {"error": {"code": code, "message": "try later"}}
                    ).encode()
            if host.split(":")[0] == self.blob_host:
                status, out_headers, data = handle_blob_request(self.blobs, method, path, query, headers, body)
            elif path == "/discovery":
                status, out_headers, data = 200, {"Content-Type": "application/json"}, json.dumps(self.state.discovery()).encode()
            elif headers.get("authorization") != f"Bearer {self.token}":
                status, out_headers = 401, {"Content-Type": "application/json", "WWW-Authenticate": 'Bearer error="invalid_token"'}
                data = json.dumps({"error": {"code": "InvalidAuthenticationToken", "message": "The access token is invalid."}}).encode()
            else:
                status, out_headers, payload = self.state.handle(method, path, query, body)
                data = json.dumps(payload).encode() if payload is not None else b""
                out_headers = {"Content-Type": "application/json", **out_headers}
            record.status = status
            return status, out_headers, data


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    azure: FakeAzureML

    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, out_headers, data = self.azure.dispatch(self.command, headers.get("host", ""), self.path, headers, body)
        self.send_response(status)
        for key, value in out_headers.items():
            if key.lower() != "content-length":
                self.send_header(key, value)
        if self.command == "HEAD" and "Content-Length" in out_headers:
            self.send_header("Content-Length", out_headers["Content-Length"])
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD" and data:
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = do_HEAD = _serve

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass
