"""A launch into a run dir whose Slurm job is still queued or running: follow that job, or refuse.

The run dir records the job it submitted last (``slurm/job_id``). While
Slurm still has that job pending or running, a launch with the same settings
follows it instead of submitting a second one (a re-run after Ctrl-C with
``on_interrupt=detach``, ``wait=false`` or a killed launcher). A launch with
other settings would end with the job's results under the new settings'
name, so it is refused in one line listing what differs, before Hydra
rewrites ``.hydra/config.yaml`` (``follows_job_in``, called by the run-dir
guard, ``cifar_dist/rundir/guard.py``): the run dir keeps describing the job it
holds. Only how the launcher follows may change (``FOLLOW_ONLY``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.errors import CifarDistError
from cifar_dist.launchers.slurm.client import JobInfo, SlurmClient
from cifar_dist.rundir.resume_policy import SAVED_CONFIG, all_settings, changed

# launcher.* keys that change how this process follows the job, not the job.
FOLLOW_ONLY = frozenset(
    f"launcher.{key}"
    for key in ("wait", "poll_interval_s", "on_interrupt", "stream_output", "log_tail_lines", "dry_run")
)


class FollowConflict(CifarDistError):
    """A re-run that would follow a running Slurm job but asks for other settings."""


def live_job(client: SlurmClient, job_id: str) -> Optional[JobInfo]:
    """The job if Slurm has it queued or running (one query), else None."""
    info = client.states([job_id]).get(job_id) or client.show(job_id)
    return info if info is not None and not info.finished else None


def _settings(cfg: DictConfig) -> Dict[str, Any]:
    """Every setting that describes the job (the launcher's follow-only keys excluded; ``all_settings`` leaves out
    ``engine.why``, which changes once the job has written checkpoints)."""
    return {k: v for k, v in all_settings(cfg).items() if k not in FOLLOW_ONLY}


def differences(saved: DictConfig, new: DictConfig) -> List[str]:
    """``name (job: X, now: Y)`` for every setting of the job's config that the new one changes."""
    return changed(_settings(saved), _settings(new), was="job: ", now_label="now: ")


def check_same_settings(run_dir: Path, cfg: DictConfig, job_id: str, info: JobInfo) -> None:
    saved = run_dir / SAVED_CONFIG
    if not saved.is_file():
        return
    differing = differences(OmegaConf.load(saved), cfg)
    if differing:
        raise FollowConflict(
            f"run dir {run_dir} holds Slurm job {job_id} ({info.state}), submitted with other settings: "
            f"{'; '.join(differing)}. Re-run with the job's settings to follow it, or cancel it (scancel {job_id}; "
            "its checkpoints are kept) and re-run to go on with the new ones, or choose another hydra.run.dir"
        )
