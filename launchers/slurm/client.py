"""Slurm's own commands, driven directly: ``sbatch``, ``squeue``, ``scontrol show job``, ``scancel``.

Job state comes from the controller's memory (pending, running, and finished
jobs for MinJobAge seconds): ``squeue -j a,b,c`` asks for every watched job
in one call (``queue.py`` makes that one call per poll round, as submitit's
watcher does with ``sacct``), ``scontrol show job`` only for a job squeue no
longer lists. Not ``sacct``: many clusters run without accounting, and there
it fails or says nothing; it is asked once, for who cancelled a job, and its
silence is fine. Every failure of a command is a ``LaunchError`` with Slurm's
own message.
"""

from __future__ import annotations

import pwd
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

from cifar_dist.common.environment import snapshot
from cifar_dist.common.external_commands import DEFAULT_TIMEOUT_S, run_command
from cifar_dist.launchers.base import LaunchError

# States after which the job will not run again by itself (a requeued job passes through
# REQUEUED/REQUEUE_HOLD/REQUEUE_FED back to PENDING instead).
FINISHED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
    }
)
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(.*?)(?=\s[A-Za-z][A-Za-z0-9_:/]*=|$)")
_INVALID_JOB = "Invalid job id"
# squeue --Format fields, "|"-separated: array tasks as <array id>_<task>, -r lists pending tasks one by one.
_SQUEUE_FIELDS = ("JobArrayID", "State", "Reason", "NodeList", "RestartCnt", "exit_code")
_SQUEUE_FORMAT = ",".join(f"{name}:|" for name in _SQUEUE_FIELDS)
# What sbatch says when a setting does not fit the cluster, and the setting that says it.
_REFUSAL_SETTINGS = (
    ("partition", "launcher.partition"),
    ("account", "launcher.account"),
    ("qos", "launcher.qos"),
    ("gres", "launcher.gres or launcher.gpus_per_node"),
    ("time limit", "launcher.time_min"),
    ("node configuration", "launcher.nodes, ntasks_per_node, cpus_per_task, mem_gb or constraint"),
    ("memory", "launcher.mem_gb"),
    ("constraint", "launcher.constraint"),
    ("feature", "launcher.constraint"),
)


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


def squeue_info(line: str) -> Optional[JobInfo]:
    """One line of ``squeue -O <_SQUEUE_FORMAT>``; its exit_code is a wait status (256: exit 1, 15: SIGTERM)."""
    values = [v.strip() for v in line.split("|")]
    if len(values) < len(_SQUEUE_FIELDS) or not values[0]:
        return None
    job_id, state, reason, nodes, restarts, status = values[: len(_SQUEUE_FIELDS)]
    wait_status = int(status) if status.isdigit() else 0
    return JobInfo(
        job_id=job_id,
        state=state.split("+")[0],
        reason=reason or "None",
        nodes=nodes,
        restarts=int(restarts) if restarts.isdigit() else 0,
        exit_code=wait_status >> 8,
        exit_signal=wait_status & 0x7F,
    )


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
    """Runs Slurm's commands with the given environment (``SLURM_CONF`` picks the cluster); ``job_env``: variables
    sbatch alone gets on top of it, for the job it submits (secrets no file may hold: script.secret_env)."""

    def __init__(
        self,
        env: Optional[Mapping[str, str]] = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        job_env: Optional[Mapping[str, str]] = None,
    ):
        self.env = dict(env) if env is not None else None
        self.timeout_s = timeout_s
        self.job_env = dict(job_env or {})

    def _run(
        self, argv: Sequence[str], what: str, env: Optional[Mapping[str, str]] = None
    ) -> subprocess.CompletedProcess:
        try:
            return run_command(
                argv,
                f"Slurm ({what})",
                "is slurmctld up? check with `scontrol ping`, then re-run",
                self.timeout_s,
                self.env if env is None else env,
                error=LaunchError,
            )
        except FileNotFoundError:
            raise LaunchError(
                f"{argv[0]} not found on PATH: run this on a Slurm login node, or install the client "
                "(apt-get install slurm-client) configured for your cluster"
            ) from None

    def submit(self, script: Path, after: Sequence[str] = ()) -> str:
        """``sbatch --parsable``: the new job's id (an array's id for an array script); with ``after``, it
        starts only once those jobs have ended (``--dependency=afterany:...``)."""
        dependency = [f"--dependency=afterany:{':'.join(after)}"] if after else []
        env = {**(self.env if self.env is not None else snapshot()), **self.job_env} if self.job_env else None
        done = self._run(["sbatch", "--parsable", *dependency, str(script)], "submit", env)
        if done.returncode != 0:
            raise LaunchError(refusal(script, done.stderr))
        return done.stdout.strip().split(";")[0]

    def states(self, job_ids: Sequence[str]) -> Dict[str, JobInfo]:
        """Every job of ``job_ids`` squeue still lists (``12`` or an array task ``12_3``), in one call."""
        if not job_ids:
            return {}
        argv = [
            "squeue",
            "--noheader",
            "--array",
            "--states=all",
            f"--jobs={','.join(job_ids)}",
            f"--Format={_SQUEUE_FORMAT}",
        ]
        done = self._run(argv, "squeue")
        if done.returncode != 0:
            if _INVALID_JOB in done.stderr:  # squeue says this only when it lists none of them
                return {}
            raise LaunchError(f"squeue failed: {_first_line(done.stderr)}")
        infos = (squeue_info(line) for line in done.stdout.splitlines())
        return {info.job_id: info for info in infos if info is not None}

    def cancelled_by(self, job_id: str) -> Optional[str]:
        """Who cancelled the job, where accounting records it (sacct: "CANCELLED by 1000"); else None."""
        try:
            done = self._run(
                ["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job_id}", "--format=State"], "sacct"
            )
        except LaunchError:
            return None
        match = re.search(r"CANCELLED by (\d+)", done.stdout if done.returncode == 0 else "")
        return _user_name(int(match.group(1))) if match else None

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


def refusal(script: Path, stderr: str) -> str:
    """sbatch's refusal in one line, naming the setting only when Slurm's message is about one."""
    reason = _first_line(stderr)
    settings = [setting for word, setting in _REFUSAL_SETTINGS if word in reason.lower()]
    hint = f"; fix {settings[0]}" if settings else "; see the batch script (launcher.dry_run=true prints it)"
    return f"sbatch refused {script}: {reason}{hint}"


def _user_name(uid: int) -> str:

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else "no message"
