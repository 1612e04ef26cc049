"""``launcher=slurm``: each run one ``sbatch`` job, every point of a sweep submitted at once.

prepare: check the settings, write ``<run dir>/slurm/job.sbatch`` (script.py);
a dry run prints it and stops. submit: ``sbatch`` it (or follow the job this
run dir already has queued or running), record its id. The watch loop of
``ClusterLauncher`` then polls every job (job.py) until all have ended.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from cifar_dist.launchers.base import JobSpec, LaunchResult
from cifar_dist.launchers.cluster import ClusterLauncher
from cifar_dist.launchers.slurm.client import SlurmClient
from cifar_dist.launchers.slurm.config import check, conf_from_kwargs, problems
from cifar_dist.launchers.slurm.job import SlurmJob, record_job_id, recorded_job_id
from cifar_dist.launchers.slurm.script import SCRIPT_NAME, SLURM_DIR, batch_script, output_file

log = logging.getLogger(__name__)


@dataclass
class PreparedJob:
    job: JobSpec
    script: Path
    task: str  # train or evaluate: what the job's result file is


class SlurmLauncher(ClusterLauncher):
    def __init__(self, **kwargs):
        self.conf = conf_from_kwargs(kwargs)
        self.client = SlurmClient()

    def config_problems(self):
        return problems(self.conf)

    def prepare(self, job: JobSpec) -> PreparedJob:
        check(self.conf)
        task = str(job.cfg.task.get("name", "train"))
        _warn_if_requeue_cannot_resume(job, task)
        script = job.output_dir / SLURM_DIR / SCRIPT_NAME
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(batch_script(self.conf, job), "utf-8")
        return PreparedJob(job=job, script=script, task=task)

    def report_dry_run(self, prepared: PreparedJob) -> LaunchResult:
        print(f"Dry run: wrote {prepared.script}; submit it by hand with: sbatch {prepared.script}")
        print(prepared.script.read_text("utf-8"), end="", flush=True)
        return LaunchResult(exit_code=0, message=f"dry run: wrote {prepared.script}")

    def submit(self, prepared: PreparedJob) -> SlurmJob:
        run_dir = prepared.job.output_dir
        previous = recorded_job_id(run_dir)
        info = self.client.show(previous) if previous else None
        if info is not None and not info.finished:
            log.info("Slurm job %s of this run dir is %s: following it instead of submitting again", previous, info.state)
            return SlurmJob(self.client, self.conf, run_dir, prepared.script, previous, prepared.task,
                            follow_from_start=False)
        job_id = self.client.submit(prepared.script)
        record_job_id(run_dir, job_id)
        conf = self.conf
        log.info("submitted Slurm job %s: %d node(s) x %d rank(s), %d min; run dir %s",
                 job_id, conf.nodes, conf.ntasks_per_node, conf.time_min, run_dir)
        if not conf.wait:
            log.info("follow it with `squeue -j %s` and `tail -f %s`, or re-run the same command to wait for it",
                     job_id, output_file(run_dir, job_id))
        return SlurmJob(self.client, conf, run_dir, prepared.script, job_id, prepared.task)


def _warn_if_requeue_cannot_resume(job: JobSpec, task: str) -> None:
    """A requeued training job starts again in the same run dir: only trainer.resume=auto resumes there."""
    trainer = job.cfg.get("trainer")
    resume = str(trainer.get("resume", "auto")).lower() if trainer is not None else "auto"
    if task == "train" and resume != "auto":
        log.warning("trainer.resume=%s: a requeued or resubmitted Slurm job restarts in the same run dir and will %s; "
                    "use trainer.resume=auto", resume,
                    "refuse to touch its checkpoints" if resume == "false" else "fail on its first start")
