"""One local HTTPS server answering both the ARM (Batch AI) and the File
service calls, recording every request so tests can assert what the real
SDKs sent, with injectable faults (429/503 + Retry-After; both in
``recording``) and a token check.

    /subscriptions/...                -> arm.BatchAIState
    /operations/<id>                  -> long-running operation status
    /<account>/<share>/<path>         -> files.handle_file_request
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from .arm import BatchAIState
from .files import FileStore, handle_file_request
from .recording import Answer, Fault, Recorded, RecordingHTTPS

__all__ = ["FakeAzure", "Fault", "Recorded"]


@dataclass
class FakeAzure(RecordingHTTPS):
    account: str = "fakeacct"
    account_key: str = ""
    token: str = "fake-arm-token"
    queued_s: float = 0.3
    running_s: float = 0.8
    throttled_code = "Throttled"

    def __post_init__(self):
        super().__post_init__()
        self.files = FileStore()
        self.batchai = BatchAIState(self.files, lambda: self.url, self.queued_s, self.running_s)

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, cert_dir: Path) -> FakeAzure:
        self.serve(cert_dir)
        return self

    def stop(self) -> None:
        with self.lock:
            self.batchai.stop()
        self.shutdown()

    @property
    def file_endpoint(self) -> str:
        return f"{self.url}/{self.account}"

    # --- queries for tests ----------------------------------------------------------------

    def arm_requests(self, method: Optional[str] = None, contains: str = "") -> List[Recorded]:
        with self.lock:
            return [
                r
                for r in self.requests
                if r.path.startswith("/subscriptions/")
                and (method is None or r.method == method)
                and contains in r.path
            ]

    def job_creates(self) -> List[Recorded]:
        return [r for r in self.arm_requests("PUT", "/jobs/") if "/terminate" not in r.path]

    def jobs(self):
        with self.lock:
            return list(self.batchai.jobs.values())

    # --- answers ---------------------------------------------------------------------------

    def answer(
        self, method: str, host: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes
    ) -> Answer:
        self.batchai.advance()
        if path.startswith("/subscriptions/") or path.startswith("/operations/"):
            if headers.get("authorization") != f"Bearer {self.token}":
                status, out_headers, payload = (
                    401,
                    {},
                    {"error": {"code": "AuthenticationFailed", "message": "The access token is invalid."}},
                )
            else:
                status, out_headers, payload = self.batchai.handle(method, path, query, body)
            data = json.dumps(payload).encode() if payload is not None else b""
            return status, {**out_headers, "Content-Type": "application/json"}, data
        account, _, rest = path.lstrip("/").partition("/")
        share, _, file_path = rest.partition("/")
        auth = headers.get("authorization", "")
        if account != self.account or not (auth.startswith(f"SharedKey {account}:") or query.get("sig")):
            return 403, {"x-ms-error-code": "AuthenticationFailed"}, b""
        return handle_file_request(self.files, method, share, file_path.rstrip("/"), query, headers, body)
