"""Following a submitted Batch AI job until it ends: what the tutorial did with
``az batchai job show``, ``cluster show --query nodeStateCounts``, ``job file
stream``, ``storage file download`` and ``cluster resize --target 0``.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from cifar_dist.common.log_tail import print_tail
from cifar_dist.common.results import read_results_or_warn
from cifar_dist.config.override_syntax import shell_command
from cifar_dist.launchers.azure.errors import azure_errors
from cifar_dist.launchers.base import LaunchError, LaunchResult
from cifar_dist.launchers.batchai.job import ShareLayout
from cifar_dist.launchers.batchai.storage import read_from
from cifar_dist.launchers.cluster_base import detached, rerun_or

log = logging.getLogger(__name__)

TERMINAL = ("succeeded", "failed")
STREAMED = ("stdout.txt", "stderr.txt")
LOCAL_SUBDIR = "batchai"  # in the run dir: job.json's companions, streamed stdout/stderr


@dataclass
class _Stream:
    url: Optional[str] = None
    offset: int = 0
    pending: bytes = b""
    restarted: bool = False  # the job was requeued: the file may start over


def errors_text(info) -> str:
    """A job's executionInfo.errors as one line: 'code: message (name=value, ...)'."""
    out = []
    for error in getattr(info, "errors", None) or []:
        text = f"{error.code}: {error.message}"
        details = ", ".join(f"{d.name}={d.value}" for d in (getattr(error, "details", None) or []))
        out.append(text + (f" ({details})" if details else ""))
    return "; ".join(out)


@dataclass
class JobFollower:
    """Follows one job, a poll at a time (``cluster.watch`` polls every job of a sweep in
    one loop): reports state and node changes and requeues, streams its output, and
    fetches its results once it has ended."""

    service: Any  # client.BatchAIService
    share: Any  # storage.FileShare
    layout: ShareLayout
    output_dir: Path
    on_interrupt: str
    poll_interval_s: float
    stream_output: bool
    stderr_tail_lines: int
    scale_down: bool
    storage_kwargs: Dict[str, Any] = field(default_factory=dict)
    task: str = "train"  # evaluate: the result is evaluation.json, not metrics.json
    requeues: int = 0  # times the service put the job back in the queue after it had started
    _streams: Dict[str, _Stream] = field(default_factory=dict)
    _started_at: Any = None  # executionInfo.startTime of the current run
    _last_state: Optional[str] = None
    _last_nodes: Optional[str] = None

    @property
    def name(self) -> str:
        return self.layout.job

    def poll(self) -> Optional[LaunchResult]:
        """One round: the job's outcome once it has ended and its outputs are local, else None."""
        with azure_errors(f"follow Batch AI job {self.name}"):
            job = self._ended_job()
            return None if job is None else self._finish(job)

    def interrupt(self) -> LaunchResult:
        """Ctrl-C: terminate the job or leave it running, as launcher.on_interrupt says."""
        with azure_errors(f"stop following Batch AI job {self.name}"):
            return self._interrupted()

    # --- one poll ------------------------------------------------------------------

    def _ended_job(self):
        """Ask for the job's (and its cluster's) state once; the job when it has ended."""
        job = self.service.get_job(self.name)
        if job is None:
            raise LaunchError(f"job {self.name} disappeared (deleted?); re-run to submit it again")
        state = str(job.execution_state)
        if self._restarted(self._last_state, state, job):
            self._report_requeue(job, state)
        nodes = _node_counts(self.service.get_cluster())
        if (state, nodes) != (self._last_state, self._last_nodes):
            log.info("job %s: %s | cluster %s nodes: %s", self.name, state, self.service.settings.cluster, nodes)
            self._last_state, self._last_nodes = state, nodes
        if self.stream_output and state != "queued":
            self._pump_streams()
        if state in TERMINAL:
            self._pump_streams()
            return job
        return None

    def _restarted(self, last_state: Optional[str], state: str, job) -> bool:
        """Whether the job went back to the queue after it had started (Batch AI requeues a job
        whose node was preempted or failed): seen as running -> queued, or, when a poll missed
        the queued spell, as a new executionInfo.startTime."""
        start = getattr(job.execution_info, "start_time", None)
        previous, self._started_at = self._started_at, start if state == "running" else self._started_at
        if last_state == "running" and state == "queued":
            self._started_at = None
            return True
        return state == "running" and previous is not None and start is not None and start != previous

    def _report_requeue(self, job, state: str) -> None:
        self.requeues += 1
        why = errors_text(job.execution_info) or "the service gave no reason (a preempted low-priority or failed node)"
        then = (
            "and resumes from its last checkpoint on the share (trainer.resume=auto)"
            if self.task == "train"
            else "and starts scoring again"
        )
        log.warning(
            "job %s was requeued by Batch AI (%s, requeue %d): %s; it runs again on another node %s",
            self.name,
            "now " + state,
            self.requeues,
            why,
            then,
        )
        for name, stream in self._streams.items():
            stream.url = None  # list the files again: the new run may have new ones
            stream.restarted = True
            if stream.pending:  # the killed run's unfinished last line
                self._echo(name, stream, b"\n")

    def _pump_streams(self) -> None:
        """Read what is new in stdout.txt/stderr.txt (ranged reads from the SAS downloadUrl)."""

        if not all(self._streams.get(n, _Stream()).url for n in STREAMED):
            files = self.service.output_files(self.name)
            for name in STREAMED:
                if name in files:
                    if name not in self._streams:
                        # Following the job again (after a detach): carry on after what is saved.
                        local = self.output_dir / LOCAL_SUBDIR / name
                        self._streams[name] = _Stream(offset=local.stat().st_size if local.is_file() else 0)
                    stream = self._streams[name]
                    stream.url = files[name].download_url
                    size = getattr(files[name], "content_length", None)
                    if stream.restarted and size is not None and size < stream.offset:
                        # The new run writes the file afresh (a longer one is taken as appended to).
                        stream.offset = 0
                        self._save(name, f"--- {self.name} restarted after requeue {self.requeues} ---\n".encode())
                    stream.restarted = False
        for name in STREAMED:
            stream = self._streams.get(name)
            if stream is None or not stream.url:
                continue
            data = read_from(stream.url, stream.offset, **self.storage_kwargs)
            if data is None:  # the SAS link expired or the file is gone: ask for a new link next time
                stream.url = None
                continue
            if data:
                stream.offset += len(data)
                self._save(name, data)
                self._echo(name, stream, data)

    def _save(self, name: str, data: bytes) -> None:
        local = self.output_dir / LOCAL_SUBDIR / name
        local.parent.mkdir(parents=True, exist_ok=True)
        with open(local, "ab") as fh:
            fh.write(data)

    def _echo(self, name: str, stream: _Stream, data: bytes) -> None:
        if not self.stream_output:
            return
        text = stream.pending + data
        complete, _, stream.pending = text.rpartition(b"\n")
        if complete:
            out = sys.stdout if name == "stdout.txt" else sys.stderr
            out.write(complete.decode("utf-8", "replace") + "\n")
            out.flush()

    # --- the end --------------------------------------------------------------------

    def _finish(self, job) -> LaunchResult:
        fetched = self.share.download_tree(self.layout.run_dir, self.output_dir, skip_prefixes=(".hydra/",))
        log.info("downloaded %d output file(s) of job %s into %s", len(fetched), self.name, self.output_dir)
        # tracking=mlflow: the nodes did not log (tracking.remote=import) or may have missed some: send the run dir.
        from cifar_dist.tracking.job_hooks import after_download

        after_download(self.output_dir, succeeded=str(job.execution_state) == "succeeded")
        metrics = read_results_or_warn(self.output_dir)
        self._maybe_scale_down()
        requeued = f" after {self.requeues} requeue(s)" if self.requeues else ""
        if str(job.execution_state) == "succeeded":
            log.info("Batch AI job %s succeeded%s", self.name, requeued)
            return LaunchResult(exit_code=0, metrics=metrics, message=f"job {self.name} succeeded{requeued}")
        info = job.execution_info
        exit_code = info.exit_code if info is not None and info.exit_code else 1
        errors = errors_text(info)
        print_tail(self.output_dir / LOCAL_SUBDIR / "stderr.txt", self.stderr_tail_lines, f"{self.name} stderr.txt")
        reason = f"Batch AI job {self.name} failed{requeued} with exit code {exit_code}"
        if errors:
            reason += f" ({errors})"
        return LaunchResult(
            exit_code=min(max(int(exit_code), 1), 255),
            metrics=metrics,
            message=reason + f"; stderr is in {self.output_dir / LOCAL_SUBDIR / 'stderr.txt'}",
        )

    def _maybe_scale_down(self) -> None:
        if not self.scale_down:
            return
        busy = [j for j in self.service.active_jobs() if j != self.name]
        if busy:
            log.info("not scaling the cluster down: %d other job(s) of the experiment still active", len(busy))
            return
        self.service.resize_cluster(0)

    def _interrupted(self) -> LaunchResult:
        settings = self.service.settings
        if self.on_interrupt == "terminate":
            log.warning("interrupted: terminating Batch AI job %s", self.name)
            self.service.terminate_job(self.name)
            return LaunchResult(exit_code=130, message=f"interrupted; Batch AI job {self.name} terminated")
        show = shell_command(
            "az",
            "batchai",
            "job",
            "show",
            "--resource-group",
            settings.resource_group,
            "--workspace",
            settings.workspace,
            "--experiment",
            settings.conf.experiment,
            "--name",
            self.name,
        )
        return detached(f"Batch AI job {self.name}", rerun_or(show))


def _node_counts(cluster) -> str:
    counts = getattr(cluster, "node_state_counts", None)
    if counts is None:
        return "unknown"
    return ", ".join(
        f"{n} {label}"
        for label, n in (
            ("idle", counts.idle_node_count),
            ("preparing", counts.preparing_node_count),
            ("running", counts.running_node_count),
            ("leaving", counts.leaving_node_count),
            ("unusable", counts.unusable_node_count),
        )
    )
