"""Running a job's command for real, as one Azure ML node would: the code
asset (from the fake's blob store) as the working directory, the run_dir
output as a local folder that persists across requeues (a read-write mount),
``${{outputs.*}}`` and ``${{inputs.*}}`` replaced by local paths, the job's
environment variables set, the output captured as the rank-0 user log. One
node: a job of several processes per instance starts them under this
machine's mpirun, as Azure ML's MPI distribution does on a node.

Preemption (``fake_azure.node_process``): the process group is killed (SIGKILL)
as soon as the run dir holds a finished checkpoint; the job then goes back to
the queue and runs again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List

from helpers.fake_azure.node_process import NodeProcess

_DATASTORE_PATH = re.compile(r"^azureml://(?:.*/)?datastores/(?P<ds>[^/]+)/paths/(?P<path>.+)$")
_JOB_OUTPUT = re.compile(r"^azureml://jobs/(?P<job>[^/]+)/outputs/(?P<output>[^/]+)(?:/paths/(?P<path>.*))?$")


class NodeRun(NodeProcess):
    """One attempt of one job (a requeued job gets a new one)."""

    def __init__(self, state, job, preempt: bool):
        props = job.props
        per_instance = (props.get("distribution") or {}).get("processCountPerInstance", 1)
        assert props["resources"]["instanceCount"] == 1, "the fake has one node: launcher.instance_count=1"
        self.attempt = job.attempt
        folder = state.node_root / job.name
        self.code = _materialize_code(state, props["codeId"], folder / "code")
        self.outputs = folder / "outputs" / "run_dir"
        self.outputs.mkdir(parents=True, exist_ok=True)
        self.logs = folder / f"attempt{self.attempt}"
        log_file = self.logs / "user_logs" / "std_log_process_0.txt"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        command = props["command"]
        for name in props.get("outputs") or {}:
            command = command.replace("${{outputs.%s}}" % name, str(folder / "outputs" / name))
        for name, item in (props.get("inputs") or {}).items():
            command = command.replace(
                "${{inputs.%s}}" % name, str(_materialize_input(state, item["uri"], folder / "inputs" / name))
            )
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AZURE_", "FAKE_AZURE", "CIFAR_DIST_", "HTTPS_PROXY", "https_proxy"))
        }
        env.pop("PYTHONPATH", None)  # the code asset, not the source tree, is what runs
        env.update(props.get("environmentVariables") or {})  # the job's own (PYTHONPATH=user/code), as on a node
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        with open(log_file, "wb") as out:
            super().__init__(
                [*_mpi_distribution(per_instance), "bash", "-c", command],
                env=env,
                cwd=self.code,
                stdout=out,
                stderr=subprocess.STDOUT,
                run_dir=self.outputs,
                preempt=preempt,
            )


def _mpi_distribution(processes: int) -> List[str]:
    """How an MPI job's node starts its ranks: one process as it is, several under the node's mpirun
    (Azure ML's ``distribution: {type: mpi}`` runs ``mpirun -np <process_count_per_instance>``)."""
    if processes == 1:
        return []
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return ["mpirun", *root, "-np", str(processes), "--bind-to", "none", "--oversubscribe"]


def _materialize_code(state, code_id: str, folder: Path) -> Path:
    if folder.is_dir():
        return folder
    name, version = re.search(r"/codes/([^/]+)/versions/([^/]+)$", code_id).groups()
    uri = state.codes[(name, version)]["properties"]["codeUri"]
    container, _, prefix = uri.split("://", 1)[1].split("/", 1)[1].partition("/")
    state.blobs.export_prefix(container, prefix, folder)
    return folder


def _materialize_input(state, uri: str, folder: Path) -> Path:
    job_output = _JOB_OUTPUT.match(uri)
    if job_output:
        return (
            state.node_root
            / job_output.group("job")
            / "outputs"
            / job_output.group("output")
            / (job_output.group("path") or "")
        )
    match = _DATASTORE_PATH.match(uri)
    assert match, f"the fake cannot mount input {uri}"
    from .workspace import CONTAINER

    path = match.group("path").rstrip("/")
    state.blobs.export_prefix(CONTAINER, path, folder)
    single = state.blobs.get(CONTAINER, path)
    return folder / Path(path).name if single is not None else folder
