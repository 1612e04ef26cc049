"""Following a submitted Azure ML job, one non-blocking round at a time: what a
user does with ``az ml job show``, ``az ml job stream`` and ``az ml job download``.

Each ``poll`` reads the job's status (printing transitions: NotStarted,
Queued, Preparing, Running, Finalizing, then Completed, Failed or Canceled),
reads what is new in rank 0's log (ranged reads of the link the run history
gives), notices a requeue (a preempted low-priority node: the job goes back
from Running to the queue and resumes from its last checkpoint in its
outputs), and once the job has ended downloads its run_dir output into the
local run dir, so the result looks like a local run's.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from cifar_dist.common.atomic_files import atomic_path
from cifar_dist.common.log_tail import print_tail
from cifar_dist.common.results import read_results_or_warn
from cifar_dist.config.override_syntax import shell_command
from cifar_dist.launchers.azureml.client import sdk_errors
from cifar_dist.launchers.azureml.job import LOCAL_SUBDIR, OUTPUT_NAME
from cifar_dist.launchers.base import LaunchError, LaunchResult
from cifar_dist.launchers.cluster_base import ClusterJob, detached, rerun_or

log = logging.getLogger(__name__)

TERMINAL = ("Completed", "Failed", "Canceled", "NotResponding")
QUEUED = ("NotStarted", "Starting", "Provisioning", "Queued", "Preparing")
# Rank 0's output (the per-rank wrapper passes it through); single-process jobs log to std_log.txt.
RANK0_LOGS = ("user_logs/std_log_process_0.txt", "user_logs/std_log.txt")
LOG_FILE = "std_log.txt"  # in the run dir's azureml/: rank 0's log as streamed
_SKIPPED_OUTPUTS = (".hydra",)  # the local launch wrote its own


@dataclass
class _LogStream:
    url: Optional[str] = None
    offset: int = 0
    pending: bytes = b""


@dataclass
class AzureMLJob(ClusterJob):
    workspace: Any  # client.Workspace
    name: str
    output_dir: Path
    on_interrupt: str
    stream_output: bool
    log_tail_lines: int
    task: str = "train"  # evaluate: the result is evaluation.json
    requeues: int = 0
    _status: Optional[str] = None
    _log: _LogStream = field(default_factory=_LogStream)

    # --- one round ------------------------------------------------------------------

    def poll(self) -> Optional[LaunchResult]:
        """One round; a service error that azure-core's retries did not cure ends this
        job's watch with that error (the other jobs of a sweep go on)."""
        try:
            return self._poll()
        except LaunchError as exc:
            return LaunchResult(exit_code=2, message=f"{exc}; the job itself may still run: re-run to follow it")

    def _poll(self) -> Optional[LaunchResult]:

        with sdk_errors(f"follow job {self.name}"):
            job = self.workspace.get_job(self.name)
            if job is None:
                return LaunchResult(
                    exit_code=1,
                    message=f"Azure ML job {self.name} disappeared (deleted?); "
                    "re-run the same command to submit it again",
                )
            status = job_status(job)
            self.report(status)
            if status not in QUEUED:
                self._pump_log()
            if status not in TERMINAL:
                return None
            return self._finish(status)

    def report(self, status: str) -> None:
        """Say when the status changed (and when that change is a requeue)."""
        if status == self._status:
            return
        if self._status in ("Running", "Finalizing") and status in QUEUED:
            self.requeues += 1
            then = "resumes from its last checkpoint in its outputs" if self.task == "train" else "scores again"
            log.warning(
                "job %s went back from %s to %s (requeue %d: a preempted low-priority node); it %s",
                self.name,
                self._status,
                status,
                self.requeues,
                then,
            )
            self._log = _LogStream(offset=self._log.offset)  # ask for the new run's log link
            self._echo(b"\n")
            self._save(f"--- {self.name} requeued ({self.requeues}) ---\n".encode())
        log.info("Azure ML job %s: %s", self.name, status)
        self._status = status

    def _pump_log(self) -> None:
        """Read what is new in rank 0's log; the run history gives a fresh link when asked."""
        # lazy: comes with the azure extra
        import requests

        if self._log.url is None:
            files = self.workspace.run_details(self.name).log_files or {}
            url = next((files[n] for n in RANK0_LOGS if n in files), None)
            if url is None:
                return
            self._log.url = url
        try:
            response = requests.get(self._log.url, headers={"Range": f"bytes={self._log.offset}-"}, timeout=60)
        except requests.RequestException as exc:  # the log is a convenience: try again next round
            log.debug("reading the log of job %s: %s", self.name, type(exc).__name__)
            self._log.url = None
            return
        if response.status_code == 416:  # nothing new
            return
        if response.status_code not in (200, 206):
            self._log.url = None  # the link expired: ask for a new one next round
            return
        data = response.content if response.status_code == 206 else response.content[self._log.offset :]
        if response.status_code == 200 and len(response.content) < self._log.offset:
            data = response.content  # a requeued run writes its log afresh
            self._log.offset = 0
        if data:
            self._log.offset += len(data)
            self._save(data)
            self._echo(data)

    def _save(self, data: bytes) -> None:
        path = self.output_dir / LOCAL_SUBDIR / LOG_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:
            fh.write(data)

    def _echo(self, data: bytes) -> None:
        if not self.stream_output:
            return
        complete, _, self._log.pending = (self._log.pending + data).rpartition(b"\n")
        if complete:
            sys.stdout.write(complete.decode("utf-8", "replace") + "\n")
            sys.stdout.flush()

    # --- the end --------------------------------------------------------------------

    def _finish(self, status: str) -> LaunchResult:
        fetched = self._download()
        log.info("downloaded %d output file(s) of job %s into %s", fetched, self.name, self.output_dir)
        metrics = read_results_or_warn(self.output_dir)
        requeued = f" after {self.requeues} requeue(s)" if self.requeues else ""
        if status == "Completed":
            log.info("Azure ML job %s completed%s", self.name, requeued)
            return LaunchResult(exit_code=0, metrics=metrics, message=f"job {self.name} completed{requeued}")
        print_tail(self.output_dir / LOCAL_SUBDIR / LOG_FILE, self.log_tail_lines, f"job {self.name}'s log")
        details = self.workspace.run_details(self.name)
        error = getattr(getattr(details, "error", None), "error", None)
        why = f" ({error.code}: {' '.join(str(error.message).split())[:300]})" if error is not None else ""
        return LaunchResult(
            exit_code=1 if status != "Canceled" else 130,
            metrics=metrics,
            message=f"Azure ML job {self.name} {status.lower()}{requeued}{why}; "
            f"its log is in {self.output_dir / LOCAL_SUBDIR / LOG_FILE}",
        )

    def _download(self) -> int:
        """The run_dir output into the local run dir (merged: the local launch's own files stay)."""
        with tempfile.TemporaryDirectory(prefix="azureml-download-") as tmp:
            source = self.workspace.download_outputs(self.name, OUTPUT_NAME, Path(tmp))
            count = 0
            for path in sorted(source.rglob("*")) if source.is_dir() else []:
                rel = path.relative_to(source)
                if path.is_dir() or rel.parts[0] in _SKIPPED_OUTPUTS:
                    continue
                with atomic_path(self.output_dir / rel) as tmp:  # a kill leaves no half file under its name
                    shutil.copy2(path, tmp)
                count += 1
        return count

    # --- Ctrl-C ---------------------------------------------------------------------

    def interrupt(self) -> LaunchResult:
        if self.on_interrupt == "cancel":
            log.warning("interrupted: canceling Azure ML job %s", self.name)
            self.workspace.cancel_job(self.name)
            return LaunchResult(exit_code=130, message=f"interrupted; Azure ML job {self.name} canceled")
        settings = self.workspace.settings
        show = shell_command(
            "az",
            "ml",
            "job",
            "show",
            "--name",
            self.name,
            "--resource-group",
            settings.resource_group,
            "--workspace-name",
            settings.workspace,
        )
        return detached(f"Azure ML job {self.name}", rerun_or(show))

    def close(self) -> None:
        self.workspace.close()


def job_status(job) -> str:
    """The job's status by its service name (the SDK hands back a str enum or a plain str)."""
    status = job.status
    return str(getattr(status, "value", status))
