"""Slurm's own commands, driven directly: ``sbatch``, ``scontrol show job``, ``scancel``.

Job state comes from ``scontrol show job`` (the controller's memory: pending,
running, and finished jobs for MinJobAge seconds), never from ``sacct``: many
clusters run without accounting, and there ``sacct`` fails or says nothing.
Every failure of a command is a ``LaunchError`` with Slurm's own message.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

from cifar_dist.launchers.base import LaunchError

# States after which the job will not run again by itself (a requeued job passes through
# REQUEUED/REQUEUE_HOLD/REQUEUE_FED back to PENDING instead).
FINISHED = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
    "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT",
})
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(.*?)(?=\s[A-Za-z][A-Za-z0-9_:/]*=|$)")
_INVALID_JOB = "Invalid job id"


@dataclass(frozen=True)
class JobInfo:
    """What ``scontrol show job`` says about one job."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, ... (flags such as "+" dropped)
    reason: str  # why it is pending (Priority, Resources...), or None
    nodes: str  # NodeList ("(null)" while pending)
    restarts: int  # times Slurm requeued it
    exit_code: int  # the batch script's exit status
    exit_signal: int

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


def parse_show_job(text: str) -> Dict[str, str]:
    """``scontrol -o show job`` output (one line of Key=Value) as a dict."""
    return {m.group(1): m.group(2).strip() for m in _FIELD.finditer(text.strip())}


def job_info(fields: Mapping[str, str]) -> JobInfo:
    code, _, sig = fields.get("ExitCode", "0:0").partition(":")
    return JobInfo(
        job_id=fields.get("JobId", ""),
        state=fields.get("JobState", "UNKNOWN").split("+")[0],
        reason=fields.get("Reason", "None"),
        nodes=fields.get("NodeList", ""),
        restarts=int(fields.get("Restarts", "0") or 0),
        exit_code=int(code or 0),
        exit_signal=int(sig or 0),
    )


class SlurmClient:
    """Runs Slurm's commands with the given environment (``SLURM_CONF`` picks the cluster)."""

    def __init__(self, env: Optional[Mapping[str, str]] = None, timeout_s: float = 60.0):
        self.env = dict(env) if env is not None else None
        self.timeout_s = timeout_s

    def _run(self, argv: Sequence[str], what: str) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=self.timeout_s)
        except FileNotFoundError:
            raise LaunchError(
                f"{argv[0]} not found on PATH: run this on a Slurm login node, or install the client "
                "(apt-get install slurm-client) configured for your cluster"
            ) from None
        except subprocess.TimeoutExpired:
            raise LaunchError(f"{what}: {argv[0]} did not answer in {self.timeout_s:g}s; is slurmctld up?") from None

    def submit(self, script: Path) -> str:
        """``sbatch --parsable``: the new job's id."""
        done = self._run(["sbatch", "--parsable", str(script)], "submit")
        if done.returncode != 0:
            raise LaunchError(f"sbatch refused {script}: {_first_line(done.stderr)}; fix the launcher.* setting it names")
        return done.stdout.strip().split(";")[0]

    def show(self, job_id: str) -> Optional[JobInfo]:
        """The job, or None once the controller has forgotten it (after MinJobAge)."""
        done = self._run(["scontrol", "-o", "show", "job", job_id], f"show job {job_id}")
        if done.returncode != 0:
            if _INVALID_JOB in done.stderr:
                return None
            raise LaunchError(f"scontrol show job {job_id} failed: {_first_line(done.stderr)}")
        return job_info(parse_show_job(done.stdout.splitlines()[0] if done.stdout else ""))

    def cancel(self, job_id: str) -> None:
        done = self._run(["scancel", job_id], f"cancel job {job_id}")
        if done.returncode != 0:
            raise LaunchError(f"scancel {job_id} failed: {_first_line(done.stderr)}")


def _first_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else "no message"
