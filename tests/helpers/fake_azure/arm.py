"""Microsoft.BatchAI (api-version 2018-05-01) as the SDK sees it: workspaces,
experiments, clusters and jobs under /subscriptions/.../resourceGroups/...,
long-running operations through Azure-AsyncOperation and Location headers,
listOutputFiles with SAS download URLs.

Jobs run on the clock: queued for ``queued_s``, running for ``running_s``
(while "running" they write stdout lines, and at the end the outputs a
training run writes, into the mounted share), then succeeded, or failed when
the job's environment holds FAKE_OUTCOME=fail or when a file the job needs
was not uploaded. A scoring job (``task: evaluate`` in the uploaded config)
looks for its model where the node would (``evaluate.model`` resolved through
the job's mounts) and fails as the node would when it is not on the share,
else writes evaluation.json, predictions.csv and confusion_matrix.png.

``node_root`` (see nodes.py) runs the job's entry script for real instead;
``preemptions = n`` requeues every job n times after it has started (a clock
job once it has written all its stdout and been polled twice since, a real one
once it has written a checkpoint), reporting why in executionInfo.errors as the
service reported errors (the code and message are the fake's own: the launcher
prints whatever the service sends). A requeued job starts again only after a
client has seen it queued, so slow polling cannot miss the requeue.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .files import FileStore
from .nodes import Mirror, NodeRun

API_VERSION = "2018-05-01"
MOUNT_ROOT = "$AZ_BATCHAI_JOB_MOUNT_ROOT/"
_RESOURCE = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.BatchAI"
    r"/workspaces/(?P<ws>[^/]+)"
    r"(?:/clusters/(?P<cluster>[^/]+)"
    r"|/experiments/(?P<exp>[^/]+)(?:/jobs(?:/(?P<job>[^/]+)(?:/(?P<action>terminate|listOutputFiles))?)?)?)?$"
)
STDOUT_LINES = 6


@dataclass
class FakeJob:
    name: str
    path: str  # ARM id
    body: Dict[str, Any]  # what the SDK sent (the whole request body)
    created: float
    queued_s: float
    running_s: float
    guid: str = field(default_factory=lambda: uuid.uuid4().hex)
    state: str = "queued"
    exit_code: Optional[int] = None
    errors: List[Dict[str, str]] = field(default_factory=list)
    lines_written: int = 0
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    terminated: bool = False
    scored: Optional[Dict[str, Any]] = None  # a scoring job: what it read from the share
    attempt: int = 0  # runs started (a requeued job runs again)
    preempted: int = 0
    start_time: Optional[str] = None  # executionInfo.startTime of the current run
    node: Optional[NodeRun] = None  # the real process of the current run (node_root mode)
    runs: List[NodeRun] = field(default_factory=list)
    synced_at: float = 0.0  # last copy of the node's files into the share
    polls: int = 0  # GETs of the job since its state (or stdout) last changed

    @property
    def props(self) -> Dict[str, Any]:
        return self.body["properties"]

    def env(self, name: str) -> Optional[str]:
        for item in self.props.get("environmentVariables", []):
            if item["name"] == name:
                return item["value"]
        return None


class BatchAIState:
    def __init__(self, files: FileStore, base_url_fn, queued_s: float = 0.3, running_s: float = 0.8):
        self.files = files
        self.base_url = base_url_fn
        self.queued_s = queued_s
        self.running_s = running_s
        self.workspaces: Dict[str, Dict[str, Any]] = {}
        self.experiments: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.clusters: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.jobs: Dict[Tuple[str, str, str], FakeJob] = {}
        self.operations: Dict[str, int] = {}  # op id -> polls left before it succeeds
        # Sweep tests: no job finishes before this many exist (or hold_limit_s has passed
        # since the first was created), so a launcher that waits for each job before
        # submitting the next is caught however slow the machine is.
        self.finish_after_jobs = 0
        self.hold_limit_s = 20.0
        # Preempt (kill and requeue) every job this many times after it has started.
        self.preemptions = 0
        # Run the entry script for real, below this directory (see nodes.py).
        self.node_root: Optional[Path] = None
        self._mirror: Optional[Mirror] = None

    def stop(self) -> None:
        """Leave no node process behind."""
        for job in self.jobs.values():
            if job.node is not None:
                job.node.kill()

    # --- the clock -------------------------------------------------------------------

    def advance(self) -> None:
        now = time.monotonic()
        for job in self.jobs.values():
            if job.state in ("succeeded", "failed"):
                continue
            age = now - job.created
            # A requeued job stays queued until a client has seen it queued (however slowly it polls).
            if job.state == "queued" and age >= job.queued_s and (job.preempted == 0 or job.polls >= 1):
                job.state, job.started_at, job.polls = "running", now, 0
                job.attempt += 1
                job.start_time = datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
                missing = self._missing_inputs(job)
                if missing:
                    self._fail(
                        job,
                        127,
                        [f"python: can't open file '{m}': [Errno 2] No such file or directory" for m in missing],
                    )
                    continue
                if self.node_root is not None:
                    self._start_node(job)
            if job.state == "running" and job.node is not None:
                self._follow_node(job, now)
                continue
            if job.state == "running":
                share, out = self._stdouterr(job)
                due = min(STDOUT_LINES, int((now - job.started_at) / job.running_s * STDOUT_LINES) + 1)
                while job.lines_written < due:
                    job.lines_written += 1
                    job.polls = 0
                    self.files.append(
                        share,
                        f"{out}/stdout.txt",
                        f"Epoch {job.lines_written}/{STDOUT_LINES} - loss: 1.{9 - job.lines_written}\n".encode(),
                    )
                if job.preempted < self.preemptions:
                    # Preempted at the end of the run, once a client has polled twice since the last
                    # stdout line (so a follower has seen it running and read all of its output).
                    if job.lines_written == STDOUT_LINES and job.polls >= 2:
                        self._requeue(job, now)
                    continue
                held = len(self.jobs) < self.finish_after_jobs and now - self._first_created() < self.hold_limit_s
                if now - job.started_at >= job.running_s and not held:
                    if job.env("FAKE_OUTCOME") == "fail":
                        self._fail(
                            job, 3, ["Traceback (most recent call last):", "RuntimeError: planted training failure"]
                        )
                    elif self._node_config(job).get("task", {}).get("name") == "evaluate":
                        self._score(job, now)
                    else:
                        self._write_outputs(job)
                        job.state, job.exit_code, job.finished_at = "succeeded", 0, now

    # --- preemption and real node runs ----------------------------------------------------

    def _requeue(self, job: FakeJob, now: float) -> None:
        """Batch AI's answer to a preempted low-priority node: the job goes back to the queue."""
        job.preempted += 1
        job.state, job.created, job.started_at, job.lines_written, job.node, job.polls = "queued", now, None, 0, None, 0
        job.errors = [
            {
                "code": "NodePreempted",
                "message": "The low-priority node running the job was preempted; the job was requeued",
                "details": [
                    {"name": "nodeId", "value": f"tvm-fake_{job.attempt}"},
                    {"name": "attempt", "value": str(job.attempt)},
                ],
            }
        ]
        if self.node_root is None:
            share, out = self._stdouterr(job)
            self.files.write(share, f"{out}/stdout.txt", b"")  # the next run writes it afresh

    def _mounts(self, job: FakeJob) -> List[Tuple[str, str]]:
        return [
            (m["azureFileUrl"].rstrip("/").rsplit("/", 1)[1], m["relativeMountPath"]) for m in self.props_shares(job)
        ]

    def _disk(self, job: FakeJob, share: str, path: str) -> Path:
        mount = next(m for s, m in self._mounts(job) if s == share)
        return self.node_root / mount / path

    def _start_node(self, job: FakeJob) -> None:
        hvd = job.props["horovodSettings"]
        assert hvd["processCount"] == 1, "the fake runs one process per job: set launcher.node_count=1"
        if self._mirror is None:
            self._mirror = Mirror(self.files, self.node_root)
        for share, mount in self._mounts(job):
            self._mirror.export(share, mount)
        run_share, run = self.run_dir(job)
        out_share, out = self._stdouterr(job)
        job.node = NodeRun(
            self.node_root,
            hvd["pythonScriptFilePath"],
            hvd["commandLineArgs"],
            {e["name"]: e["value"] for e in job.props.get("environmentVariables", [])},
            self._disk(job, out_share, out),
            self._disk(job, run_share, run),
            preempt=job.preempted < self.preemptions,
        )
        job.runs.append(job.node)

    def _follow_node(self, job: FakeJob, now: float) -> None:
        code = job.node.exit_code()
        if code is None and now - job.synced_at < 0.2:
            return
        for share, mount in self._mounts(job):
            self._mirror.import_changes(share, mount)
        job.synced_at = now
        if code is None:
            return
        if job.node.preempted:
            self._requeue(job, now)
        elif code == 0:
            job.state, job.exit_code, job.finished_at, job.errors = "succeeded", 0, now, []
        else:
            job.state, job.exit_code, job.finished_at = "failed", code, now
            job.errors = [{"code": "JobFailed", "message": f"The job exited with exit code {code}"}]

    def _first_created(self) -> float:
        return min(j.created for j in self.jobs.values())

    def _fail(self, job: FakeJob, code: int, stderr: List[str]) -> None:
        share, out = self._stdouterr(job)
        self.files.append(share, f"{out}/stderr.txt", ("\n".join(f"noise line {i}" for i in range(50)) + "\n").encode())
        self.files.append(share, f"{out}/stderr.txt", ("\n".join(stderr) + "\n").encode())
        job.state, job.exit_code, job.finished_at = "failed", code, time.monotonic()
        job.errors = [{"code": "JobFailed", "message": f"The job exited with exit code {code}"}]

    def _node_path(self, job: FakeJob, node_path: str) -> Tuple[str, str]:
        """$AZ_BATCHAI_JOB_MOUNT_ROOT/<mount>/<path> -> (share, path), through the job's mounts."""
        assert node_path.startswith(MOUNT_ROOT), node_path
        mount, _, rest = node_path[len(MOUNT_ROOT) :].partition("/")
        for share in self.props_shares(job):
            if share["relativeMountPath"] == mount:
                return share["azureFileUrl"].rstrip("/").rsplit("/", 1)[1], rest
        raise AssertionError(f"no mount {mount} in {job.props.get('mountVolumes')}")

    def props_shares(self, job: FakeJob) -> List[Dict[str, Any]]:
        return job.props.get("mountVolumes", {}).get("azureFileShares", [])

    def _args(self, job: FakeJob) -> Dict[str, str]:
        words = job.props["horovodSettings"]["commandLineArgs"].split()
        return dict(zip(words[::2], words[1::2]))

    def run_dir(self, job: FakeJob) -> Tuple[str, str]:
        return self._node_path(job, self._args(job)["--run-dir"])

    def _stdouterr(self, job: FakeJob) -> Tuple[str, str]:
        share, prefix = self._node_path(job, job.props["stdOutErrPathPrefix"])
        sub, rg, ws, exp = re.match(
            r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.BatchAI/workspaces/([^/]+)/experiments/([^/]+)/",
            job.path,
        ).groups()
        segment = f"{sub}/{rg}/workspaces/{ws}/experiments/{exp}/jobs/{job.name}/{job.guid}"
        return share, f"{prefix}/{segment}/stdouterr"

    def _missing_inputs(self, job: FakeJob) -> List[str]:
        needed = [job.props["horovodSettings"]["pythonScriptFilePath"]]
        args = self._args(job)
        needed.append(f"{args['--config-dir']}/{args['--config-name']}.yaml")
        needed += [w for w in job.props["jobPreparation"]["commandLine"].split() if w.endswith(".whl")]
        missing = []
        for node_path in needed:
            share, path = self._node_path(job, node_path)
            if not self.files.exists(share, path):
                missing.append(node_path)
        return missing

    def _node_config(self, job: FakeJob) -> Dict[str, Any]:
        """The uploaded job_config.yaml, unresolved (interpolations resolve on the node)."""
        from omegaconf import OmegaConf

        args = self._args(job)
        share, path = self._node_path(job, f"{args['--config-dir']}/{args['--config-name']}.yaml")
        return OmegaConf.to_container(OmegaConf.create(self.files.read(share, path).decode()), resolve=False)

    def _on_node(self, job: FakeJob, value: str) -> Optional[Tuple[str, str]]:
        """A config value that names a file on a mount -> (share, path); None for anything else."""
        match = re.match(r"^\$\{oc\.env:AZ_BATCHAI_JOB_MOUNT_ROOT\}/(.+)$", value)
        return self._node_path(job, MOUNT_ROOT + match.group(1)) if match else None

    def _score(self, job: FakeJob, now: float) -> None:
        """What `task=evaluate` does on a node, as far as the share is concerned."""
        evaluate = self._node_config(job)["evaluate"]
        model = self._on_node(job, evaluate["model"])
        tree = self.files.shares.get(model[0], {}) if model else {}
        found = None
        if model and tree.get(model[1]) is not None:
            found = model[1]
        elif model and tree.get(f"{model[1]}/saved_models/keras_cifar10_trained_model.h5") is not None:
            found = f"{model[1]}/saved_models/keras_cifar10_trained_model.h5"
        elif model:
            checkpoints = sorted(
                k for k in tree if re.match(re.escape(model[1]) + r"/checkpoints/checkpoint-\d{3,}\.h5$", k)
            )
            found = checkpoints[-1] if checkpoints else None
        images = evaluate.get("input", "test")
        image_path = self._on_node(job, images)
        if found is None or (
            images not in ("test", "train")
            and (
                image_path is None
                or not any(
                    k == image_path[1] or k.startswith(image_path[1] + "/")
                    for k in self.files.shares.get(image_path[0], {})
                )
            )
        ):
            what = f"evaluate.model={evaluate['model']}" if found is None else f"evaluate.input={images}"
            self._fail(
                job,
                2,
                [f"cifar_dist: error: {what}: no such file or directory; point it at a training run dir or a .h5 file"],
            )
            return
        data = self.files.read(model[0], found)
        job.scored = {
            "model": found,
            "model_sha256": hashlib.sha256(data).hexdigest(),
            "input": image_path[1] if image_path else images,
        }
        share, run = self.run_dir(job)
        result = {
            "model": found,
            "input": job.scored["input"],
            "ranks": job.props["horovodSettings"]["processCount"],
            "loss": 1.25,
            "accuracy": 0.5,
            "labelled": 4,
            "model_sha256": job.scored["model_sha256"],
        }
        self.files.write(share, f"{run}/evaluation.json", json.dumps(result).encode())
        self.files.write(
            share, f"{run}/predictions.csv", b"index,label,predicted,confidence\n0,cat,cat,0.9\n1,dog,cat,0.6\n"
        )
        self.files.write(share, f"{run}/confusion_matrix.png", b"\x89PNG\r\n\x1a\n fake")
        self.files.write(share, f"{run}/.hydra/config.yaml", b"node: side\n")
        job.state, job.exit_code, job.finished_at = "succeeded", 0, now

    def _write_outputs(self, job: FakeJob) -> None:
        """What a training run leaves in its run dir (trainer.py's artifacts)."""
        share, run = self.run_dir(job)
        self.files.write(
            share,
            f"{run}/saved_models/keras_cifar10_trained_model.h5",
            b"\x89HDF\r\n\x1a\n fake model " + job.name.encode(),
        )
        self.files.write(share, f"{run}/checkpoints/checkpoint-001.h5", b"\x89HDF\r\n\x1a\n fake checkpoint")
        self.files.write(
            share,
            f"{run}/metrics.json",
            json.dumps({"test": {"accuracy": 0.625, "loss": 1.05}, "job": job.name}).encode(),
        )
        self.files.write(share, f"{run}/training_log.csv", b"epoch,loss\n0,1.9\n")
        self.files.write(share, f"{run}/cifar_dist_node.log", b"[INFO] node log\n")
        self.files.write(share, f"{run}/.hydra/config.yaml", b"node: side\n")

    # --- requests ----------------------------------------------------------------------

    def handle(self, method: str, path: str, query: Dict[str, str], body: bytes) -> Tuple[int, Dict[str, str], Any]:
        if path.startswith("/operations/"):
            return self._operation(path.rsplit("/", 1)[1])
        if query.get("api-version") != API_VERSION:
            return 400, {}, _err("InvalidApiVersion", f"api-version must be {API_VERSION}")
        match = _RESOURCE.match(path)
        if not match:
            return 404, {}, _err("InvalidResourceType", path)
        g = match.groupdict()
        ws = g["ws"]
        if g["cluster"]:
            return self._cluster(method, path, (ws, g["cluster"]), body)
        if g["exp"] is None:
            return self._workspace(method, path, ws, body)
        listing = path.endswith("/jobs")
        if g["job"] is None and not listing:
            return self._experiment(method, path, (ws, g["exp"]))
        if (ws, g["exp"]) not in self.experiments:
            return 404, {}, _err("ResourceNotFound", f"experiment {g['exp']} not found")
        if listing:
            return 200, {}, {"value": [self._job_json(j) for k, j in self.jobs.items() if k[:2] == (ws, g["exp"])]}
        return self._job(method, path, (ws, g["exp"], g["job"]), g["action"], query, body)

    def _lro(self, kind: str, polls: int = 1) -> Dict[str, str]:
        op = uuid.uuid4().hex
        self.operations[op] = polls
        url = f"{self.base_url()}/operations/{op}?api-version={API_VERSION}"
        header = "Azure-AsyncOperation" if kind == "async" else "Location"
        return {header: url, "Retry-After": "0"}

    def _operation(self, op: str) -> Tuple[int, Dict[str, str], Any]:
        left = self.operations.get(op)
        if left is None:
            return 404, {}, _err("OperationNotFound", op)
        if left > 0:
            self.operations[op] = left - 1
            return (
                202,
                {"Retry-After": "0", "Location": f"{self.base_url()}/operations/{op}?api-version={API_VERSION}"},
                {"status": "InProgress"},
            )
        return 200, {}, {"status": "Succeeded"}

    def _workspace(self, method, path, ws, body):
        if method == "GET":
            if ws not in self.workspaces:
                return 404, {}, _err("ResourceNotFound", f"workspace {ws} not found")
            return 200, {}, self.workspaces[ws]
        if method == "PUT":
            location = json.loads(body)["location"]
            self.workspaces[ws] = {
                "id": path,
                "name": ws,
                "type": "Microsoft.BatchAI/workspaces",
                "location": location,
                "properties": {"provisioningState": "succeeded"},
            }
            return 202, self._lro("location"), None
        return 405, {}, _err("MethodNotAllowed", method)

    def _experiment(self, method, path, key):
        if method == "GET":
            if key not in self.experiments:
                return 404, {}, _err("ResourceNotFound", f"experiment {key[1]} not found")
            return 200, {}, self.experiments[key]
        if method == "PUT":
            if key[0] not in self.workspaces:
                return 404, {}, _err("ResourceNotFound", f"workspace {key[0]} not found")
            self.experiments[key] = {"id": path, "name": key[1], "properties": {"provisioningState": "succeeded"}}
            return 202, self._lro("location"), None
        return 405, {}, _err("MethodNotAllowed", method)

    def _cluster(self, method, path, key, body):
        if method == "GET":
            if key not in self.clusters:
                return 404, {}, _err("ResourceNotFound", f"cluster {key[1]} not found")
            return 200, {}, self._cluster_json(key)
        if method == "PUT":
            sent = json.loads(body)
            self.clusters[key] = {
                "id": path,
                "name": key[1],
                "properties": {**sent["properties"], "provisioningState": "succeeded"},
            }
            return 202, self._lro("async"), None
        if method == "PATCH":
            if key not in self.clusters:
                return 404, {}, _err("ResourceNotFound", f"cluster {key[1]} not found")
            sent = json.loads(body)
            self.clusters[key]["properties"]["scaleSettings"] = sent["properties"]["scaleSettings"]
            return 200, {}, self._cluster_json(key)
        return 405, {}, _err("MethodNotAllowed", method)

    def _cluster_json(self, key) -> Dict[str, Any]:
        cluster = json.loads(json.dumps(self.clusters[key]))
        target = cluster["properties"].get("scaleSettings", {}).get("manual", {}).get("targetNodeCount", 0)
        running = sum(j.props.get("nodeCount", 1) for j in self.jobs.values() if j.state == "running")
        preparing = sum(j.props.get("nodeCount", 1) for j in self.jobs.values() if j.state == "queued")
        running = min(running, target)
        preparing = min(preparing, max(target - running, 0))
        cluster["properties"]["currentNodeCount"] = target
        cluster["properties"]["nodeStateCounts"] = {
            "idleNodeCount": max(target - running - preparing, 0),
            "runningNodeCount": running,
            "preparingNodeCount": preparing,
            "unusableNodeCount": 0,
            "leavingNodeCount": 0,
        }
        return cluster

    def _job(self, method, path, key, action, query, body):
        job = self.jobs.get(key)
        if action is None and method == "PUT":
            if job is not None:
                return 409, {}, _err("Conflict", f"job {key[2]} already exists")
            self.jobs[key] = FakeJob(key[2], path, json.loads(body), time.monotonic(), self.queued_s, self.running_s)
            return 202, self._lro("async"), None
        if job is None:
            return 404, {}, _err("ResourceNotFound", f"job {key[2]} not found")
        if action is None and method == "GET":
            job.polls += 1
            return 200, {}, self._job_json(job)
        if action == "terminate" and method == "POST":
            if job.state not in ("succeeded", "failed"):
                if job.node is not None:
                    job.node.kill()
                job.terminated = True
                job.state, job.finished_at = "failed", time.monotonic()
                job.errors = [{"code": "JobTerminated", "message": "The job was terminated by the user"}]
            return 202, self._lro("location"), None
        if action == "listOutputFiles" and method == "POST":
            if query.get("outputdirectoryid") != "stdouterr" or job.state == "queued":
                return 200, {}, {"value": []}
            share, out = self._stdouterr(job)
            files = []
            for name in ("stdout.txt", "stderr.txt", "execution.log"):
                data = self.files.read(share, f"{out}/{name}")
                if data is None and name == "stderr.txt":
                    self.files.write(share, f"{out}/{name}", b"")
                    data = b""
                if data is None:
                    continue
                account = self.props_shares(job)[0]["accountName"]
                url = f"{self.base_url()}/{account}/{share}/{out}/{name}?sv=2017-04-17&sr=f&sp=r&sig=fakesignature"
                files.append(
                    {"name": name, "fileType": "file", "downloadUrl": url, "properties": {"contentLength": len(data)}}
                )
            return 200, {}, {"value": files}
        return 405, {}, _err("MethodNotAllowed", f"{method} {action}")

    def _job_json(self, job: FakeJob) -> Dict[str, Any]:
        props = json.loads(json.dumps(job.props))
        for share in props.get("mountVolumes", {}).get("azureFileShares", []):
            share.get("credentials", {}).pop("accountKey", None)  # never reported back
        props["executionState"] = job.state
        props["provisioningState"] = "succeeded"
        props["jobOutputDirectoryPathSegment"] = self._stdouterr(job)[1].rsplit("/stdouterr", 1)[0]
        info: Dict[str, Any] = {"startTime": job.start_time} if job.started_at else {}
        if job.state in ("succeeded", "failed"):
            info.update({"endTime": "2018-06-01T00:10:00Z", "exitCode": job.exit_code, "errors": job.errors})
        elif job.errors:  # requeued: why
            info["errors"] = job.errors
        if info:
            props["executionInfo"] = info
        return {
            "id": job.path,
            "name": job.name,
            "type": "Microsoft.BatchAI/workspaces/experiments/jobs",
            "properties": props,
        }


def _err(code: str, message: str) -> Dict[str, Any]:
    return {"error": {"code": code, "message": message}}
