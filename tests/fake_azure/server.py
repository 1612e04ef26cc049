"""One local HTTPS server answering both the ARM (Batch AI) and the File
service calls, recording every request so tests can assert what the real
SDKs sent, with injectable faults (429/503 + Retry-After) and a token check.

    /subscriptions/...                -> arm.BatchAIState
    /operations/<id>                  -> long-running operation status
    /<account>/<share>/<path>         -> files.handle_file_request
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

from .arm import BatchAIState
from .certs import make_self_signed
from .files import FileStore, handle_file_request


@dataclass
class Recorded:
    method: str
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
        return f"{self.method} {self.path}?{self.query}\n{head}\n\n{self.body.decode('utf-8', 'replace')}"


@dataclass
class Fault:
    """Answer ``status`` (with Retry-After) to the next ``times`` requests that match."""

    match: Callable[[str, str], bool]
    status: int
    times: int
    retry_after: str = "1"
    hits: int = 0


@dataclass
class FakeAzure:
    account: str = "fakeacct"
    account_key: str = ""
    token: str = "fake-arm-token"
    queued_s: float = 0.3
    running_s: float = 0.8
    requests: List[Recorded] = field(default_factory=list)
    faults: List[Fault] = field(default_factory=list)

    def __post_init__(self):
        self.files = FileStore()
        self.batchai = BatchAIState(self.files, lambda: self.url, self.queued_s, self.running_s)
        self.lock = threading.RLock()
        self._server: Optional[ThreadingHTTPServer] = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, cert_dir: Path) -> "FakeAzure":
        cert, key = make_self_signed(cert_dir)
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
        return self

    def stop(self) -> None:
        with self.lock:
            self.batchai.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    @property
    def file_endpoint(self) -> str:
        return f"{self.url}/{self.account}"

    # --- queries for tests ----------------------------------------------------------------

    def arm_requests(self, method: Optional[str] = None, contains: str = "") -> List[Recorded]:
        with self.lock:
            return [
                r for r in self.requests
                if r.path.startswith("/subscriptions/") and (method is None or r.method == method) and contains in r.path
            ]

    def job_creates(self) -> List[Recorded]:
        return [r for r in self.arm_requests("PUT", "/jobs/") if "/terminate" not in r.path]

    def jobs(self):
        with self.lock:
            return list(self.batchai.jobs.values())

    # --- dispatch --------------------------------------------------------------------------

    def dispatch(self, method: str, raw_path: str, headers: Dict[str, str], body: bytes):
        split = urlsplit(raw_path)
        path = unquote(split.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        record = Recorded(method, path, query, headers, body, time.monotonic())
        with self.lock:
            self.requests.append(record)
            for fault in self.faults:
                if fault.hits < fault.times and fault.match(method, path):
                    fault.hits += 1
                    record.status = fault.status
                    return fault.status, {"Retry-After": fault.retry_after, "Content-Type": "application/json"}, json.dumps(
                        {"error": {"code": "Throttled" if fault.status == 429 else "ServiceUnavailable", "message": "try later"}}
                    ).encode()
            self.batchai.advance()
            if path.startswith("/subscriptions/") or path.startswith("/operations/"):
                if headers.get("authorization") != f"Bearer {self.token}":
                    status, out_headers, payload = 401, {}, {"error": {"code": "AuthenticationFailed", "message": "The access token is invalid."}}
                else:
                    status, out_headers, payload = self.batchai.handle(method, path, query, body)
                data = json.dumps(payload).encode() if payload is not None else b""
                out_headers = {**out_headers, "Content-Type": "application/json"}
            else:
                account, _, rest = path.lstrip("/").partition("/")
                share, _, file_path = rest.partition("/")
                auth = headers.get("authorization", "")
                if account != self.account or not (auth.startswith(f"SharedKey {account}:") or query.get("sig")):
                    status, out_headers, data = 403, {"x-ms-error-code": "AuthenticationFailed"}, b""
                else:
                    status, out_headers, data = handle_file_request(self.files, method, share, file_path.rstrip("/"), query, headers, body)
            record.status = status
            return status, out_headers, data


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    azure: FakeAzure

    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, out_headers, data = self.azure.dispatch(self.command, self.path, headers, body)
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
