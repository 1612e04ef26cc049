"""What both local HTTPS doubles (Batch AI's ``fake_azure.server`` and Azure ML's
``fake_azureml.server``) share: a TLS server on a free 127.0.0.1 port whose every
request is recorded (``Recorded``, so tests can assert what the real SDKs sent)
and may be answered by an injected fault (``Fault``: 429/503 + Retry-After)
before the double's own ``answer`` sees it.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple
from urllib.parse import parse_qsl, unquote, urlsplit

from .certs import make_self_signed

Answer = Tuple[int, Dict[str, str], bytes]  # status, headers, body


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
class RecordingHTTPS:
    """Base of a double: ``serve`` starts it, ``shutdown`` stops it; subclasses implement
    ``answer`` (called under ``lock`` for every request no fault took)."""

    requests: List[Recorded] = field(default_factory=list, kw_only=True)
    faults: List[Fault] = field(default_factory=list, kw_only=True)
    throttled_code: ClassVar[str] = "TooManyRequests"  # the error code of an injected 429

    def __post_init__(self):
        self.lock = threading.RLock()
        self._server: Optional[ThreadingHTTPServer] = None

    def serve(self, cert_dir: Path, dns_names: Sequence[str] = ()) -> None:
        """Answer HTTPS (a new self-signed certificate, also in ``ca_bundle``) from a daemon thread."""
        cert, key = make_self_signed(cert_dir, dns_names)
        self.ca_bundle = cert
        handler = type("Handler", (_Handler,), {"double": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def dispatch(self, method: str, host: str, raw_path: str, headers: Dict[str, str], body: bytes) -> Answer:
        """Record the request; answer it with the first matching fault, else with ``answer``."""
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
                    code = self.throttled_code if fault.status == 429 else "ServiceUnavailable"
                    return (
                        fault.status,
                        {"Retry-After": fault.retry_after, "Content-Type": "application/json"},
                        json.dumps({"error": {"code": code, "message": "try later"}}).encode(),
                    )
            status, out_headers, data = self.answer(method, host, path, query, headers, body)
            record.status = status
            return status, out_headers, data

    def answer(
        self, method: str, host: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes
    ) -> Answer:
        raise NotImplementedError


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    double: RecordingHTTPS

    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, out_headers, data = self.double.dispatch(
            self.command, headers.get("host", ""), self.path, headers, body
        )
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
