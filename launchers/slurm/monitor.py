"""Following one submitted Slurm job: its state, its output, requeues and resubmissions, its outcome.

Each ``poll()`` reads this round's state of the job (``queue.py``: one
``squeue`` per round for every job of a sweep), prints a state change
(PENDING with Slurm's reason, RUNNING on which nodes), reports a requeue
(Slurm's ``Restarts`` went up: preemption, ``scontrol requeue``, or the job
requeueing itself after its stop signal), echoes what is new in the job's
output file (the batch script's lines and rank 0's output), and once the job
has finished returns its result: metrics on success; on failure the rank
that failed first with the tail of its log, as with ``launcher=mpirun``. A
job its time limit ended (TIMEOUT) is submitted again, up to
``launcher.max_resubmits`` times; it resumes from its last checkpoint. A
job someone cancelled (``scancel``) is reported as cancelled, by whom where
Slurm's accounting says, not by the signal its ranks got.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

from cifar_dist.common.atomic_files import atomic_write_text
from cifar_dist.common.log_tail import tail
from cifar_dist.common.results import read_results, training_complete
from cifar_dist.config.override_syntax import rerun_hint, shell_command
from cifar_dist.launchers.base import LaunchError, LaunchResult
from cifar_dist.launchers.cluster_base import ClusterJob, detached
from cifar_dist.launchers.ranks.rank_env import LOG_DIR
from cifar_dist.launchers.ranks.rank_failure import first_failure, read_exit_records
from cifar_dist.launchers.slurm.client import JobInfo, SlurmClient
from cifar_dist.launchers.slurm.config import OnInterrupt, SlurmLauncherConf
from cifar_dist.launchers.slurm.queue import JobStates
from cifar_dist.launchers.slurm.rundir_hold import launcher_note
from cifar_dist.launchers.slurm.script import SLURM_DIR, output_file

log = logging.getLogger(__name__)

JOB_ID_FILE = "job_id"  # in <run dir>/slurm: the job this run dir submitted last
MAX_FAILED_POLLS = 12  # squeue/scontrol failing this many rounds in a row ends the watch


class OutputStream:
    """New complete lines of a growing file, echoed to the console as they appear."""

    def __init__(self, path: Path, offset: int = 0, echo: bool = True):
        self.path = path
        self.offset = offset
        self.echo = echo
        self._partial = b""

    def pump(self, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        self.offset += len(data)
        text = self._partial + data
        complete, _, self._partial = text.rpartition(b"\n")
        if final and self._partial:
            complete, self._partial = text, b""
        if self.echo and complete:
            sys.stdout.write(complete.decode("utf-8", "replace") + "\n")
            sys.stdout.flush()


def record_job_id(run_dir: Path, job_id: str) -> None:
    atomic_write_text(run_dir / SLURM_DIR / JOB_ID_FILE, job_id + "\n")
    # The launcher holding the run dir's lock says it does so for this job: its batch script then
    # waits for the lock instead of refusing the run dir (rundir_hold.py).
    from cifar_dist.rundir.lock import note_holder

    note_holder(run_dir, launcher_note(job_id))


def recorded_job_id(run_dir: Path) -> Optional[str]:
    try:
        return (run_dir / SLURM_DIR / JOB_ID_FILE).read_text().strip() or None
    except OSError:
        return None


class SlurmJob(ClusterJob):
    def __init__(
        self,
        client: SlurmClient,
        conf: SlurmLauncherConf,
        output_dir: Path,
        script: Path,
        job_id: str,
        task: str,
        follow_from_start: bool = True,
        states: Optional[JobStates] = None,
    ):
        self.client = client
        self.states = states or JobStates(client)
        self.conf = conf
        self.output_dir = output_dir
        self.script = script
        self.task = task
        self.resubmits = 0
        self.requeues = 0
        self.since = time.time()
        self._failed_polls = 0
        self._switch_to(job_id, follow_from_start)

    def _switch_to(self, job_id: str, from_start: bool) -> None:
        if getattr(self, "job_id", None):
            self.states.forget(self.job_id)
        self.job_id = job_id
        self.states.watch(job_id)
        self.name = f"Slurm job {job_id}"
        path = output_file(self.output_dir, job_id)
        offset = 0 if from_start or not path.exists() else path.stat().st_size
        self.stream = OutputStream(path, offset, echo=self.conf.stream_output)
        self._shown: Optional[tuple] = None
        self._restarts: Optional[int] = None

    # --- one round ------------------------------------------------------------------

    def poll(self) -> Optional[LaunchResult]:
        try:
            info = self.states.info(self.job_id)
        except LaunchError as exc:
            # slurmctld restarting or briefly unreachable: ask again next round, give up after a while.
            self._failed_polls += 1
            if self._failed_polls >= MAX_FAILED_POLLS:
                raise
            log.warning("%s: %s (try %d of %d)", self.name, exc, self._failed_polls, MAX_FAILED_POLLS)
            return None
        self._failed_polls = 0
        if info is None:
            self.stream.pump(final=True)
            self.states.forget(self.job_id)
            return self._forgotten()
        self._report(info)
        self.stream.pump()
        if not info.finished:
            return None
        if info.state == "TIMEOUT" and self._may_resubmit():
            self._resubmit()
            return None
        self.stream.pump(final=True)
        self.states.forget(self.job_id)
        return self._result(info)

    def _report(self, info: JobInfo) -> None:
        if self._restarts is not None and info.restarts > self._restarts:
            self.requeues += info.restarts - self._restarts
            then = (
                "it runs again in the same run dir and resumes from its last checkpoint"
                if self.task == "train"
                else "it runs again"
            )
            log.warning("%s was requeued (restart %d, now %s): %s", self.name, info.restarts, info.state, then)
        self._restarts = info.restarts
        shown = (
            info.state,
            info.reason if info.state == "PENDING" else "",
            info.nodes if info.state == "RUNNING" else "",
        )
        if shown == self._shown:
            return
        self._shown = shown
        if info.state == "PENDING" and info.reason not in ("None", ""):
            log.info("%s: PENDING (%s)", self.name, info.reason)
        elif info.state == "RUNNING":
            log.info("%s: RUNNING on %s", self.name, info.nodes)
        else:
            log.info("%s: %s", self.name, info.state)

    # --- time limit -----------------------------------------------------------------

    def _may_resubmit(self) -> bool:
        if self.task != "train" or self.resubmits >= self.conf.max_resubmits:
            return False
        return not training_complete(self.output_dir)

    def _resubmit(self) -> None:
        old = self.name
        self.stream.pump(final=True)
        new_id = self.client.submit(self.script)
        record_job_id(self.output_dir, new_id)
        self.resubmits += 1
        self._switch_to(new_id, from_start=True)
        log.warning(
            "%s reached its time limit (TIMEOUT); resubmitted as %s (resubmission %d of %d): "
            "it resumes from its last checkpoint",
            old,
            self.name,
            self.resubmits,
            self.conf.max_resubmits,
        )

    # --- the end --------------------------------------------------------------------

    def _metrics(self) -> Optional[Dict[str, Any]]:
        return read_results(self.output_dir)

    def _history(self) -> str:
        parts = [f"{n} requeue(s)" for n in [self.requeues] if n] + [
            f"{n} resubmission(s)" for n in [self.resubmits] if n
        ]
        return f" after {' and '.join(parts)}" if parts else ""

    def _result(self, info: JobInfo) -> LaunchResult:
        if info.state == "COMPLETED" and info.exit_code == 0:
            log.info("%s completed%s", self.name, self._history())
            return LaunchResult(exit_code=0, metrics=self._metrics(), message=f"{self.name} completed{self._history()}")
        if info.state == "CANCELLED":
            return self._cancelled()
        how = f"{self.name} ended {info.state}{self._history()} (exit code {info.exit_code}"
        how += f", signal {info.exit_signal})" if info.exit_signal else ")"
        code = min(max(info.exit_code or 1, 1), 255)
        return LaunchResult(exit_code=code, metrics=self._metrics(), message=how + ": " + self._why(info))

    def _cancelled(self) -> LaunchResult:
        """Cancelled by someone else (this launcher's own Ctrl-C is ``interrupt``): not a rank's failure."""
        who = self.client.cancelled_by(self.job_id)
        by = f" by {who}" if who else " (scancel, or an administrator)"
        message = (
            f"{self.name} was cancelled{by}{self._history()}; checkpoints in {self.output_dir / 'checkpoints'} "
            f"are kept: {rerun_hint(self.output_dir)} to resume"
        )
        log.error("%s", message)
        return LaunchResult(exit_code=1, metrics=self._metrics(), message=message)

    def _why(self, info: JobInfo) -> str:
        log_dir = self.output_dir / LOG_DIR
        np = self.conf.world_size
        if any(r.get("exit_code") for r in read_exit_records(log_dir, np, self.since)):
            return first_failure(log_dir, np, self.since, tail(self.stream.path, 60)).message(self.output_dir)
        lines = self.conf.log_tail_lines
        hint = {
            "TIMEOUT": "raise launcher.time_min or launcher.max_resubmits",
            "OUT_OF_MEMORY": "raise launcher.mem_gb",
        }.get(info.state, "see the job's output")
        return (
            f"{hint}. Last lines of {self.stream.path}:\n{tail(self.stream.path, lines)}\n"
            f"Checkpoints in {self.output_dir / 'checkpoints'} are kept: "
            f"{rerun_hint(self.output_dir)} to resume."
        )

    def _forgotten(self) -> LaunchResult:
        """The controller no longer knows the job (purged after MinJobAge): judge by its outputs."""
        metrics = self._metrics()
        if metrics is not None and (self.task == "evaluate" or metrics.get("complete")):
            return LaunchResult(
                exit_code=0, metrics=metrics, message=f"{self.name} finished (no longer listed by Slurm)"
            )
        return LaunchResult(
            exit_code=1,
            metrics=metrics,
            message=f"{self.name} is no longer known to Slurm and left no finished result in {self.output_dir}; "
            f"see {self.stream.path}",
        )

    def interrupt(self) -> LaunchResult:
        if self.conf.on_interrupt == OnInterrupt.detach:
            follow = shell_command("tail", "-f", self.stream.path)
            return detached(
                self.name,
                f"follow it with `squeue -j {self.job_id}` and `{follow}`, "
                "or re-run the same command to follow it and get its result",
            )
        try:
            self.client.cancel(self.job_id)
        except LaunchError as exc:
            log.error("interrupted, but %s could not be cancelled: %s", self.name, exc)
            return LaunchResult(
                exit_code=130, message=f"interrupted; cancel {self.name} yourself: scancel {self.job_id}"
            )
        log.warning("interrupted: cancelled %s (scancel %s)", self.name, self.job_id)
        return LaunchResult(
            exit_code=130,
            message=f"interrupted; {self.name} cancelled; {rerun_hint(self.output_dir)} to resume "
            "from its last checkpoint",
        )
