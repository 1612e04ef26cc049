"""Microsoft.MachineLearningServices as azure-ai-ml sees it: the workspace (and
its discovery URL), the default blob datastore, AmlCompute clusters, code and
environment versions (code: start pending upload, then the blob PUTs), command
jobs (PUT, GET, cancel) and the run history (details with log links, run data).

A job moves one status per GET of it (NotStarted, Queued, Preparing, Running,
Finalizing, then Completed/Failed/Canceled), so every client sees every
transition however slowly it polls. With ``node_root`` set, a Running job
runs its command for real (see runner.py); without, it completes at once
(writing a metrics.json of its own), or with ``hold_running`` stays Running.

Recorded from azure-ai-ml 1.35.2 (a logging HTTPS server, then this double),
for ``jobs.create_or_update(load_job(job.yml))`` with a local code folder and a
Docker build context, then ``jobs.get``, the run details and ``jobs.download``:
GET codes/<uuid>/versions?hash=&hashVersion= -> POST .../versions/1/startPendingUpload
-> HEAD/PUT/PUT?comp=metadata on the SAS container (one per file) -> PUT codes/<uuid>/versions/1;
GET datastores/workspaceblobstore -> POST .../listSecrets -> blob PUTs of the build
context -> PUT environments/CliV2AnonymousEnvironment/versions/<hash>; PUT jobs/<name>;
GET jobs/<name>; GET workspaces/<ws> (discoveryUrl) -> GET <discovery> ->
GET history/v1.0/.../runs/<name>/details (logFiles); POST history/v1.0/.../rundata ->
GET datastores?isDefault=true -> datastore + listSecrets -> HEAD and list
azureml/<name>/run_dir/ -> ranged GETs of each blob.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from .blob import BlobStore
from .runner import NodeRun

DATASTORE = "workspaceblobstore"
CONTAINER = "azureml-blobstore"
_WS = (
    r"^/subscriptions/(?P<sub>[^/]+)/resource[gG]roups/(?P<rg>[^/]+)/providers/"
    r"Microsoft\.MachineLearningServices/workspaces/(?P<ws>[^/]+)"
)
_ARM = re.compile(
    _WS + r"(?:/(?P<kind>computes|codes|environments|jobs|datastores)"
    r"(?:/(?P<name>[^/]+)(?:/versions(?:/(?P<version>[^/]+))?)?(?:/(?P<action>[A-Za-z]+))?)?)?$"
)
_HISTORY = re.compile(
    r"^/history/v1\.0"
    + _WS[1:]
    + r"(?:/experiment(?:s|ids)/[^/]+)?/(?:runs|rundata)(?:/(?P<run>[^/]+))?(?:/(?P<what>details))?$"
)
STEPS = ("NotStarted", "Queued", "Preparing", "Running", "Finalizing")
TERMINAL = ("Completed", "Failed", "Canceled")


@dataclass
class FakeJob:
    name: str
    body: Dict[str, Any]
    status: str = "NotStarted"
    created_at: float = 0.0
    ended_at: Optional[float] = None
    attempt: int = 0
    preempted: int = 0
    node: Optional[NodeRun] = None
    runs: List[NodeRun] = field(default_factory=list)
    error: Optional[Dict[str, str]] = None
    cancel_requested: bool = False
    gets: int = 0
    shown: bool = False  # the current status was returned to a client at least once

    @property
    def props(self) -> Dict[str, Any]:
        return self.body["properties"]


class AzureMLState:
    def __init__(self, blobs: BlobStore, base_url: Callable[[], str], blob_url: str, node_root: Optional[Path]):
        self.blobs = blobs
        self.base_url = base_url
        self.blob_url = blob_url
        self.node_root = node_root
        self.workspaces: Dict[str, Dict[str, Any]] = {}
        self.computes: Dict[str, Dict[str, Any]] = {}
        self.codes: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.environments: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.jobs: Dict[str, FakeJob] = {}
        self.unknown: List[str] = []  # requests no route answered (the recorder's notes)
        self.preemptions = 0  # preempt every job this many times, once it has written a checkpoint
        # A simulated job (no node_root) stays Running until canceled (Ctrl-C tests).
        self.hold_running = False
        # The signature of every SAS link handed out: a secret the leak tests look for.
        self.sas_sig = "sig" + uuid.uuid4().hex
        self.fail_message: Optional[str] = None

    def stop(self) -> None:
        for job in self.jobs.values():
            if job.node is not None:
                job.node.kill()

    # --- discovery ---------------------------------------------------------------------

    def discovery(self) -> Dict[str, str]:
        url = self.base_url()
        return {
            "api": url,
            "catalog": url,
            "experimentation": url,
            "gallery": url,
            "history": url,
            "hyperdrive": url,
            "labeling": url,
            "modelmanagement": url,
            "pipelines": url,
            "studio": url,
        }

    # --- dispatch ----------------------------------------------------------------------

    def handle(self, method: str, path: str, query: Dict[str, str], body: bytes):
        match = _ARM.match(path)
        if match:
            return self._arm(method, path, match, query, json.loads(body) if body else None)
        match = _HISTORY.match(path)
        if match:
            return self._history(method, path, match)
        self.unknown.append(f"{method} {path}")
        return 404, {}, {"error": {"code": "NotFound", "message": f"the fake has no route for {method} {path}"}}

    def _arm(self, method: str, path: str, m, query: Dict[str, str], body: Optional[Dict[str, Any]]):
        kind, name, version, action = m.group("kind"), m.group("name"), m.group("version"), m.group("action")
        ws_id = (
            path.split("/computes")[0]
            .split("/codes")[0]
            .split("/environments")[0]
            .split("/jobs")[0]
            .split("/datastores")[0]
        )
        if kind is None:
            return 200, {}, self._workspace(ws_id, m.group("ws"))
        if kind == "datastores":
            return self._datastore(ws_id, name, action)
        if kind == "computes":
            return self._compute(method, ws_id, name, body)
        if kind in ("codes", "environments"):
            return self._versioned(method, ws_id, kind, name, version, action, query, body)
        if kind == "jobs":
            return self._job(method, ws_id, name, action, body)
        return 404, {}, {"error": {"code": "NotFound", "message": path}}

    def _workspace(self, ws_id: str, name: str) -> Dict[str, Any]:
        url = self.base_url()
        return self.workspaces.setdefault(
            ws_id,
            {
                "id": ws_id,
                "name": name,
                "type": "Microsoft.MachineLearningServices/workspaces",
                "location": "eastus",
                "kind": "Default",
                "properties": {
                    "workspaceId": str(uuid.uuid4()),
                    "friendlyName": name,
                    "discoveryUrl": f"{url}/discovery",
                    "mlFlowTrackingUri": f"azureml://eastus.api.azureml.ms/mlflow/v1.0{ws_id}",
                    "storageAccount": f"{ws_id.split('/providers')[0]}/providers/Microsoft.Storage/storageAccounts/"
                    f"{self.blobs.account}",
                    "provisioningState": "Succeeded",
                },
            },
        )

    def _datastore(self, ws_id: str, name: Optional[str], action: Optional[str]):
        if action == "listSecrets":
            return 200, {}, {"secretsType": "Sas", "sasToken": f"sv=2021-08-06&sr=c&sp=racwl&sig={self.sas_sig}"}
        ds = {
            "id": f"{ws_id}/datastores/{DATASTORE}",
            "name": DATASTORE,
            "properties": {
                "datastoreType": "AzureBlob",
                "accountName": self.blobs.account,
                "containerName": CONTAINER,
                "endpoint": "core.windows.net",
                "protocol": "https",
                "isDefault": True,
                "credentials": {"credentialsType": "AccountKey"},
            },
        }
        if name is None:
            return 200, {}, {"value": [ds]}
        if name != DATASTORE:
            return 404, {}, {"error": {"code": "UserError", "message": f"datastore {name} not found"}}
        return 200, {}, ds

    def _compute(self, method: str, ws_id: str, name: str, body: Optional[Dict[str, Any]]):
        key = f"{ws_id}/computes/{name}"
        if method == "GET":
            if key not in self.computes:
                return 404, {}, {"error": {"code": "ResourceNotFound", "message": f"compute {name} not found"}}
            return 200, {}, self.computes[key]
        if method == "PUT":
            body = dict(body or {})
            body.update(id=key, name=name, type="Microsoft.MachineLearningServices/workspaces/computes")
            body["properties"]["provisioningState"] = "Succeeded"
            self.computes[key] = body
            return 201, {}, body
        return 405, {}, None

    def _versioned(self, method, ws_id, kind, name, version, action, query, body):
        store = self.codes if kind == "codes" else self.environments
        if version is None:  # list; by content hash the service searches the whole workspace
            wanted = query.get("hash")  # (the SDK asks under a fresh name for anonymous code)
            items = [
                v
                for (n, _), v in store.items()
                if (v["properties"].get("properties", {}).get("hash_sha256") == wanted if wanted else n == name)
            ]
            return 200, {}, {"value": items}
        vid = f"{ws_id}/{kind}/{name}/versions/{version}"
        if action == "startPendingUpload":
            prefix = f"LocalUpload/{uuid.uuid4().hex}"
            sas = f"sv=2021-08-06&sr=c&sp=rcwl&sig={self.sas_sig}"
            container = f"{self.blob_url}/{CONTAINER}"
            return (
                200,
                {},
                {
                    "pendingUploadId": uuid.uuid4().hex,
                    "pendingUploadType": "TemporaryBlobReference",
                    "blobReferenceForConsumption": {
                        "blobUri": f"{container}/{prefix}",
                        "credential": {"credentialType": "SAS", "sasUri": f"{container}/{prefix}?{sas}"},
                        "storageAccountArmId": "/storage",
                    },
                },
            )
        if method == "PUT":
            item = {
                "id": vid,
                "name": version,
                "type": f"Microsoft.MachineLearningServices/workspaces/{kind}/versions",
                "properties": dict((body or {}).get("properties", {})),
            }
            store[(name, version)] = item
            return 201, {}, item
        if (name, version) not in store:
            return 404, {}, {"error": {"code": "UserError", "message": f"{kind} {name}:{version} not found"}}
        return 200, {}, store[(name, version)]

    # --- jobs --------------------------------------------------------------------------

    def _job(self, method: str, ws_id: str, name: str, action: Optional[str], body):
        import time

        job = self.jobs.get(name)
        if method == "PUT" and action is None:
            if job is not None:
                return 409, {}, {"error": {"code": "UserError", "message": f"job {name} already exists"}}
            job = self.jobs[name] = FakeJob(name, body, created_at=time.monotonic())
            job.body["id"] = f"{ws_id}/jobs/{name}"
            return 201, {}, self._job_view(job)
        if job is None:
            return 404, {}, {"error": {"code": "UserError", "message": f"job {name} not found"}}
        if action == "cancel":
            job.cancel_requested = True
            if job.node is not None:
                job.node.kill()
            self._end(job, "Canceled")
            return 202, {"Location": f"{self.base_url()}{ws_id}/jobs/{name}?cancelled=1"}, None
        if method == "GET":
            job.gets += 1
            if job.shown:
                self.advance(job)
            job.shown = True
            return 200, {}, self._job_view(job)
        return 405, {}, None

    def _job_view(self, job: FakeJob) -> Dict[str, Any]:
        view = json.loads(json.dumps(job.body))
        props = view["properties"]
        props["status"] = job.status
        props["services"] = {"Studio": {"endpoint": f"https://ml.azure.com/runs/{job.name}"}}
        props.setdefault("experimentName", "Default")
        view["name"] = job.name
        return view

    def advance(self, job: FakeJob) -> None:
        """One step per GET; a Running job waits for its command."""
        if job.status in TERMINAL:
            return
        if job.status == "Running" and job.node is not None:
            code = job.node.exit_code()
            if code is None:
                return
            self._collect(job)
            if job.node.preempted:
                job.preempted += 1
                job.node = None
                job.status = "Queued"  # Azure ML requeues the job of a preempted low-priority node
                return
            if code != 0:
                job.error = {
                    "code": "UserError",
                    "message": f"Execution failed. User process 'python' exited with status code {code}.",
                }
            job.status = "Finalizing"
            return
        if job.status == "Finalizing":
            if not job.runs and not job.error:
                self._simulated_outputs(job)
            self._end(job, "Failed" if job.error else "Completed")
            return
        if job.status == "Running" and self.hold_running:
            return
        job.status = STEPS[STEPS.index(job.status) + 1]
        if job.status == "Running":
            job.attempt += 1
            if self.node_root is not None:
                job.node = NodeRun(self, job, preempt=job.preempted < self.preemptions)
                job.runs.append(job.node)

    def _end(self, job: FakeJob, status: str) -> None:
        import time

        job.status = status
        job.ended_at = job.ended_at or time.monotonic()

    @staticmethod
    def simulated_accuracy(name: str) -> float:
        """The test accuracy a simulated job (no node_root) reports: its own, from its name."""
        import hashlib

        return int(hashlib.sha256(name.encode()).hexdigest()[:4], 16) / 65536

    def _simulated_outputs(self, job: FakeJob) -> None:
        metrics = {"complete": True, "test": {"loss": 1.0, "accuracy": self.simulated_accuracy(job.name)}}
        self.blobs.put(CONTAINER, f"azureml/{job.name}/run_dir/metrics.json", json.dumps(metrics).encode())

    def _collect(self, job: FakeJob) -> None:
        """Write the job's mounted output back into the datastore, where jobs.download finds it."""
        self.blobs.import_folder(CONTAINER, f"azureml/{job.name}/run_dir", job.node.outputs)

    # --- run history ------------------------------------------------------------------------

    def _history(self, method: str, path: str, m):
        run = m.group("run")
        if "/rundata" in path:
            return 200, {}, {"runMetadata": {"runId": run, "outputs": {}}}
        job = self.jobs.get(run)
        if job is None:
            return 404, {}, {"error": {"code": "UserError", "message": f"run {run} not found"}}
        details: Dict[str, Any] = {"runId": job.name, "status": job.status, "logFiles": {}, "warnings": []}
        if job.node is not None or job.runs:
            node = job.node or job.runs[-1]
            prefix = f"ExperimentRun/dcid.{job.name}/attempt{node.attempt}"
            self.blobs.live[(CONTAINER, prefix + "/")] = node.logs
            for log in sorted(node.logs.rglob("*.txt")):
                rel = log.relative_to(node.logs).as_posix()
                details["logFiles"][rel] = (
                    f"{self.blob_url}/{CONTAINER}/{prefix}/{rel}?sv=2021-08-06&sr=b&sp=r&sig={self.sas_sig}"
                )
        if job.error:
            details["error"] = {"error": job.error}
        return 200, {}, details
