"""What the cluster launchers (Batch AI, Slurm, Azure ML) share: submit every
job first, then watch all of them in one loop.

A cluster launcher turns each composed job into its service's job, as data
(``prepare``: a dry run writes it into the run dir and stops there), submits
it (``submit``) and gets back a ``ClusterJob``. ``watch`` then polls every
submitted job in turn (state changes, new log lines, requeues) until each has
ended and its outputs are local, so the jobs of a sweep run, and are
followed, side by side. Ctrl-C interrupts every job still running: each one
cancels or detaches, as its launcher's ``on_interrupt`` says.

A problem with one point (a bad setting, a refused submission) is that
point's failed result; the other points go on.
"""

from __future__ import annotations

import abc
import logging
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from cifar_dist.common.errors import CifarDistError
from cifar_dist.launchers.base import JobSpec, Launcher, LaunchResult

log = logging.getLogger(__name__)


class ClusterJob(abc.ABC):
    """One submitted job, as the watch loop sees it."""

    name: str
    output_dir: Path

    @abc.abstractmethod
    def poll(self) -> Optional[LaunchResult]:
        """One round, without blocking for long: report state changes, stream
        new output; the outcome once the job has ended and its outputs are local."""

    @abc.abstractmethod
    def interrupt(self) -> LaunchResult:
        """Ctrl-C: cancel the job (or leave it running, per on_interrupt) and say so."""

    def close(self) -> None:
        """Release clients and credentials; called once the job needs no more polls."""


def watch(
    jobs: Sequence[ClusterJob], poll_interval_s: float, sleep: Callable[[float], Any] = time.sleep
) -> List[LaunchResult]:
    """Poll every job in one loop until all have ended; results in the jobs' order."""
    results: Dict[int, LaunchResult] = {}
    try:
        while len(results) < len(jobs):
            for i, job in enumerate(jobs):
                if i in results:
                    continue
                result = _poll(job)
                if result is not None:
                    results[i] = result
                    job.close()
            if len(results) < len(jobs):
                sleep(poll_interval_s)
    except KeyboardInterrupt:
        for i, job in enumerate(jobs):
            if i not in results:
                results[i] = _interrupt(job)
    return [results[i] for i in range(len(jobs))]


def _poll(job: ClusterJob) -> Optional[LaunchResult]:
    """One poll; a problem following this job (it was deleted, the service refuses) is its failed result."""
    try:
        return job.poll()
    except CifarDistError as exc:
        log.error("%s: %s", job.name, exc)
        return LaunchResult(exit_code=1, message=str(exc))


def _interrupt(job: ClusterJob) -> LaunchResult:
    try:
        return job.interrupt()
    finally:
        job.close()


def detached(job: str, how_to_follow: str) -> LaunchResult:
    """Ctrl-C with launcher.on_interrupt=detach: ``job`` (as the user knows it, e.g.
    "Slurm job 42") keeps running on the cluster; the result says how to follow it."""
    log.warning("interrupted: %s keeps running (launcher.on_interrupt=detach)", job)
    return LaunchResult(exit_code=130, message=f"interrupted; {job} keeps running: {how_to_follow}")


def rerun_or(service_command: str) -> str:
    """How to follow a detached job: the same command again (it submits nothing new), or the service's own CLI."""
    return f"re-run the same command to follow it and fetch its outputs, or `{service_command}`"


class ClusterLauncher(Launcher):
    """Submit-then-watch for every point; subclasses say how to prepare and submit one job.

    ``self.conf`` is the launcher's config dataclass; it has at least
    ``dry_run``, ``wait`` and ``poll_interval_s``.
    """

    conf: Any
    dry_run_writes = "job"  # a dry run writes the cluster job's files (script, job file) and submits nothing

    @abc.abstractmethod
    def prepare(self, job: JobSpec) -> Any:
        """Build the service's job for ``job`` as data and write it into the run dir."""

    def already_finished(self, prepared: Any) -> Optional[LaunchResult]:
        """The result of a job that needs no submission (``prepare`` found its run dir finished), else None."""
        return None

    @abc.abstractmethod
    def report_dry_run(self, prepared: Any) -> LaunchResult:
        """Print what a real launch would send (the files ``prepare`` wrote, equivalent CLI)."""

    @abc.abstractmethod
    def submit(self, prepared: Any) -> ClusterJob:
        """Send the job (or find the one this run dir already submitted)."""

    def launch(self, job: JobSpec) -> LaunchResult:
        return self.launch_all([job])[0]

    def launch_all(self, jobs: Sequence[JobSpec]) -> List[LaunchResult]:
        results: List[Optional[LaunchResult]] = [None] * len(jobs)
        submitted: Dict[int, ClusterJob] = {}
        try:
            for i, job in enumerate(jobs):
                try:
                    prepared = self.prepare(job)
                    results[i] = self.already_finished(prepared)
                    if results[i] is not None:
                        continue
                    if self.conf.dry_run:
                        results[i] = self.report_dry_run(prepared)
                    else:
                        submitted[i] = self.submit(prepared)
                except CifarDistError as exc:
                    if len(jobs) == 1:
                        raise
                    log.error("point #%d was not submitted: %s", job.job_num, exc)
                    results[i] = LaunchResult(exit_code=2, message=str(exc))
        except BaseException:
            for cluster_job in submitted.values():
                cluster_job.close()
            raise
        if submitted and not self.conf.wait:
            for i, cluster_job in submitted.items():
                cluster_job.close()
                log.info("submitted %s; launcher.wait=false, not following it", cluster_job.name)
                results[i] = LaunchResult(exit_code=0, message=f"submitted {cluster_job.name}")
        elif submitted:
            order = sorted(submitted)
            for i, result in zip(order, watch([submitted[i] for i in order], self.conf.poll_interval_s)):
                results[i] = result
        return [r for r in results if r is not None]
