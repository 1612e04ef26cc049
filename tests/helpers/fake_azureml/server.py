"""One local HTTPS server answering what azure-ai-ml sends, recording every
request so tests can assert what the real SDK did, with injectable faults
(429/503 + Retry-After; both in ``fake_azure.recording``) and a bearer-token check.

    Host <account>.blob.<anything>  -> blob.BlobStore (the workspace's storage; SAS or key)
    /discovery                      -> the workspace's service URLs
    /subscriptions/..., /history/... -> workspace.AzureMLState (bearer token)

Reach it directly at ``url`` (ARM, run history) and, for the blob host names,
through ``proxy.url`` (an HTTP CONNECT proxy: tests set HTTPS_PROXY to it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from helpers.fake_azure.recording import Answer, Fault, Recorded, RecordingHTTPS

from .blob import BlobStore, handle_blob_request
from .proxy import ConnectProxy
from .workspace import AzureMLState

__all__ = ["FakeAzureML", "Fault", "Recorded"]


@dataclass
class FakeAzureML(RecordingHTTPS):
    account: str = "fakeacct"
    token: str = "fake-aml-token"
    storage_suffix: str = "localhost"  # the custom cloud's storage endpoint: <account>.blob.localhost
    node_root: Optional[Path] = None  # run job commands for real below this folder

    def __post_init__(self):
        super().__post_init__()
        self.blobs = BlobStore(self.account)
        self.proxy: Optional[ConnectProxy] = None
        self.state: Optional[AzureMLState] = None

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def blob_host(self) -> str:
        return f"{self.account}.blob.{self.storage_suffix}"

    def start(self, cert_dir: Path) -> FakeAzureML:
        self.serve(cert_dir, dns_names=[self.blob_host])
        self.proxy = ConnectProxy(("127.0.0.1", self._server.server_address[1])).start()
        self.state = AzureMLState(self.blobs, lambda: self.url, f"https://{self.blob_host}", self.node_root)
        return self

    def stop(self) -> None:
        with self.lock:
            if self.state is not None:
                self.state.stop()
        self.shutdown()
        if self.proxy is not None:
            self.proxy.stop()

    # --- queries for tests ----------------------------------------------------------------

    def calls(self, method: Optional[str] = None, contains: str = "") -> List[Recorded]:
        with self.lock:
            return [r for r in self.requests if (method is None or r.method == method) and contains in r.path]

    def job_creates(self) -> List[Recorded]:
        return [r for r in self.calls("PUT", "/jobs/") if r.status in (200, 201)]

    def jobs(self):
        with self.lock:
            return list(self.state.jobs.values())

    # --- answers ---------------------------------------------------------------------------

    def answer(
        self, method: str, host: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes
    ) -> Answer:
        if host.split(":")[0] == self.blob_host:
            return handle_blob_request(self.blobs, method, path, query, headers, body)
        if path == "/discovery":
            return 200, {"Content-Type": "application/json"}, json.dumps(self.state.discovery()).encode()
        if headers.get("authorization") != f"Bearer {self.token}":
            error = {"error": {"code": "InvalidAuthenticationToken", "message": "The access token is invalid."}}
            return (
                401,
                {"Content-Type": "application/json", "WWW-Authenticate": 'Bearer error="invalid_token"'},
                json.dumps(error).encode(),
            )
        status, out_headers, payload = self.state.handle(method, path, query, body)
        data = json.dumps(payload).encode() if payload is not None else b""
        return status, {"Content-Type": "application/json", **out_headers}, data
