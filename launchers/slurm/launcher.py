"""``launcher=slurm``: a run is one ``sbatch`` job, a sweep's points one job array.

prepare: check the settings, write ``<run dir>/slurm/job.sbatch`` (script.py),
unless Slurm still has the job this run dir submitted queued or running: that
one is followed and its script left as it is (follow.py); or, with no such job,
the run dir's records say it finished: nothing is submitted. A dry run prints
the scripts and stops. submit: ``sbatch`` one run's script, or for a sweep
one array script whose task i runs point i's script
(``sbatch --array=0-(N-1)%k`` with ``launcher.concurrent=k``, as submitit
submits a batch of jobs); record each point's id (``12`` or ``12_3``) in its
run dir. Then every job is followed in one loop (``cluster.watch``), its
state read from one ``squeue`` per round for all of them (queue.py);
requeues, resubmissions and Ctrl-C act on each point's own array task.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from cifar_dist.common.atomic_files import atomic_write_text
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.results import finished_run
from cifar_dist.config.override_syntax import shell_command
from cifar_dist.launchers.base import JobSpec, LaunchResult
from cifar_dist.launchers.cluster_base import ClusterLauncher, watch
from cifar_dist.launchers.ranks.heartbeat import stall_timeout_problems
from cifar_dist.launchers.slurm.client import JobInfo, SlurmClient
from cifar_dist.launchers.slurm.config import check, conf_from_kwargs, node_gpus, problems
from cifar_dist.launchers.slurm.follow import check_same_settings, live_job
from cifar_dist.launchers.slurm.monitor import SlurmJob, record_job_id, recorded_job_id
from cifar_dist.launchers.slurm.queue import JobStates
from cifar_dist.launchers.slurm.rundir_hold import launcher_note
from cifar_dist.launchers.slurm.script import (
    SCRIPT_NAME,
    SLURM_DIR,
    array_script,
    batch_script,
    output_file,
    secret_env,
)
from cifar_dist.rundir.lock import holder_job, note_holder
from cifar_dist.training.trainer import planned_epochs

log = logging.getLogger(__name__)


@dataclass
class PreparedJob:
    job: JobSpec
    script: Path
    task: str  # train or evaluate: what the job's result file is
    running: Optional[JobInfo] = None  # the job this run dir already has queued or running: followed
    finished: Optional[LaunchResult] = None  # no job runs there and the run dir finished: nothing to submit


class SlurmLauncher(ClusterLauncher):
    run_dir_folders = (SLURM_DIR,)  # slurm/: the batch script, the job's output files, the ids submitted

    def __init__(self, **kwargs):
        self.conf = conf_from_kwargs(kwargs)
        self.client = SlurmClient(job_env=secret_env(self.conf))  # launcher.env's secrets: sbatch's, not the script's

    @classmethod
    def follows_job_in(cls, run_dir: Path, cfg, holder: Optional[str]) -> bool:
        """The run-dir guard's question: does this launch follow the job that holds ``run_dir``?
        Yes if the holder is the Slurm job the run dir recorded and it asks for the same settings;
        a launch with other settings is refused (follow.py), whoever holds the lock."""

        job_id = recorded_job_id(run_dir)
        if job_id is None or (holder is not None and holder_job(holder) != f"Slurm job {job_id}"):
            return False
        info = live_job(SlurmClient(), job_id)
        if info is None:
            return False
        check_same_settings(run_dir, cfg, job_id, info)
        return holder is not None

    def processes(self) -> int:
        return self.conf.world_size

    def gpus_per_process(self) -> int:
        """The GPUs each task of the job asks Slurm for: its own (``gpus_per_task``), or its share of its node's
        (engine=auto: processes with GPUs train on JAX)."""
        if self.conf.gpus_per_task:
            return int(self.conf.gpus_per_task)
        node = node_gpus(self.conf)
        return max(1, node // self.conf.tasks_per_node) if node else 0

    def config_problems(self):
        return stall_timeout_problems(self.conf.stall_shutdown_s) + problems(self.conf)

    def prepare(self, job: JobSpec) -> PreparedJob:
        check(self.conf)
        task = str(job.cfg.task.get("name", "train"))
        script = job.output_dir / SLURM_DIR / SCRIPT_NAME
        previous = recorded_job_id(job.output_dir)
        running = live_job(self.client, previous) if previous else None
        # judged after asking Slurm, not before: a job that ends in between is then seen finished, not submitted again
        finished = self.finished(job) if running is None else None
        if finished is not None:
            return PreparedJob(job=job, script=script, task=task, finished=finished)
        if running is None:
            _warn_if_requeue_cannot_resume(job, task)
            text = batch_script(self.conf, job)  # refuses a run dir Slurm cannot take before writing anything
            atomic_write_text(script, text)
        return PreparedJob(job=job, script=script, task=task, running=running)

    def already_finished(self, prepared: PreparedJob) -> Optional[LaunchResult]:
        return prepared.finished

    def report_dry_run(self, prepared: PreparedJob) -> LaunchResult:
        if prepared.running is not None:
            print(
                f"Dry run: {prepared.job.output_dir} holds Slurm job {prepared.running.job_id} "
                f"({prepared.running.state}); its batch script {prepared.script} is left as it is"
            )
            return LaunchResult(exit_code=0, message=f"dry run: Slurm job {prepared.running.job_id} is running")
        print(f"Dry run: wrote {prepared.script}; submit it by hand with: {shell_command('sbatch', prepared.script)}")
        print(prepared.script.read_text("utf-8"), end="", flush=True)
        return LaunchResult(exit_code=0, message=f"dry run: wrote {prepared.script}")

    def submit(self, prepared: PreparedJob, states: Optional[JobStates] = None, after: Sequence[str] = ()) -> SlurmJob:
        run_dir = prepared.job.output_dir
        if prepared.running is not None:
            return self._follow(prepared, states)
        _note_submitting(run_dir)
        job_id = self.client.submit(prepared.script, after)
        record_job_id(run_dir, job_id)
        conf = self.conf
        log.info(
            "submitted Slurm job %s: %d node(s) x %d process(es), %d min; run dir %s",
            job_id,
            conf.nodes,
            conf.tasks_per_node,
            conf.time_min,
            run_dir,
        )
        if not conf.wait:
            log.info(
                "follow it with `squeue -j %s` and `tail -f %s`, or re-run the same command to wait for it",
                job_id,
                output_file(run_dir, job_id),
            )
        return SlurmJob(self.client, conf, run_dir, prepared.script, job_id, prepared.task, states=states)

    def _follow(self, prepared: PreparedJob, states: Optional[JobStates]) -> SlurmJob:
        run_dir, job_id = prepared.job.output_dir, prepared.running.job_id
        log.info(
            "Slurm job %s of this run dir is %s: following it instead of submitting again",
            job_id,
            prepared.running.state,
        )
        record_job_id(run_dir, job_id)  # says so in the run dir's lock if this process holds it
        return SlurmJob(
            self.client,
            self.conf,
            run_dir,
            prepared.script,
            job_id,
            prepared.task,
            follow_from_start=False,
            states=states,
        )

    def finished(self, job: JobSpec) -> Optional[LaunchResult]:
        """A training run whose run dir records it finished with these epochs and ranks (a re-run of a
        killed sweep's completed point): its result, without a job (which would only score it again)."""

        if str(job.cfg.task.get("name", "train")) != "train":
            return None
        processes = self.conf.world_size
        metrics = finished_run(job.output_dir, processes, lambda ranks: planned_epochs(job.cfg.trainer, ranks))
        if metrics is None:
            return None
        log.info(
            "%s already finished its %d epoch(s) on %d rank(s): nothing to submit",
            job.output_dir,
            metrics["run"]["epochs"],
            metrics["ranks"],
        )
        return LaunchResult(exit_code=0, metrics=metrics, message=f"{job.output_dir} had finished")

    # --- a sweep: one job array ---------------------------------------------------------

    def launch_all(self, jobs: Sequence[JobSpec]) -> List[LaunchResult]:
        """One job, or a job array of every point that is neither followed nor finished (``prepare``)."""
        if len(jobs) < 2:
            return super().launch_all(jobs)
        results: Dict[int, LaunchResult] = {}
        prepared: Dict[int, PreparedJob] = {}
        for i, job in enumerate(jobs):
            try:
                p = self.prepare(job)
            except CifarDistError as exc:
                log.error("point #%d was not submitted: %s", job.job_num, exc)
                results[i] = LaunchResult(exit_code=2, message=str(exc))
                continue
            if p.finished is not None:
                results[i] = p.finished
            else:
                prepared[i] = p
        if self.conf.dry_run:
            results.update(self._dry_run_array(prepared))
        else:
            results.update(self._follow_all(self._submit_all(prepared, results)))
        return [results[i] for i in range(len(jobs))]

    def _submit_all(self, prepared: Dict[int, PreparedJob], results: Dict[int, LaunchResult]) -> Dict[int, SlurmJob]:
        states = JobStates(self.client)
        submitted = {i: self._follow(p, states) for i, p in prepared.items() if p.running is not None}
        new = [i for i, p in prepared.items() if p.running is None]
        # launcher.concurrent=k counts the followed tasks too: what is submitted now starts after them
        after = [p.running.job_id for p in prepared.values() if p.running is not None] if self.conf.concurrent else []
        try:
            if len(new) == 1:
                submitted[new[0]] = self.submit(prepared[new[0]], states, after)
            elif new:
                for i, job_id in zip(new, self._submit_array([prepared[i] for i in new], after)):
                    p = prepared[i]
                    submitted[i] = SlurmJob(
                        self.client, self.conf, p.job.output_dir, p.script, job_id, p.task, states=states
                    )
        except CifarDistError as exc:
            log.error("points %s were not submitted: %s", ", ".join(f"#{prepared[i].job.job_num}" for i in new), exc)
            results.update({i: LaunchResult(exit_code=2, message=str(exc)) for i in new if i not in submitted})
        return submitted

    def _submit_array(self, points: List[PreparedJob], after: Sequence[str] = ()) -> List[str]:
        """sbatch one array for ``points`` (after the jobs ``after``); their ids ``<array>_<i>``, each recorded
        in its run dir."""
        script = self._array_script_path(points)
        script.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(script, array_script(self.conf, [p.job for p in points], array_dir(points)))
        for p in points:
            _note_submitting(p.job.output_dir)
        array_id = self.client.submit(script, after)
        ids = [f"{array_id}_{i}" for i in range(len(points))]
        for p, job_id in zip(points, ids):
            record_job_id(p.job.output_dir, job_id)
        log.info(
            "submitted Slurm job array %s: %d point(s) as tasks %s..%s%s, each %d node(s) x %d process(es), "
            "%d min; its script %s",
            array_id,
            len(points),
            ids[0],
            ids[-1],
            f", {self.conf.concurrent} at a time" if self.conf.concurrent else "",
            self.conf.nodes,
            self.conf.tasks_per_node,
            self.conf.time_min,
            script,
        )
        if not self.conf.wait:
            log.info("follow it with `squeue -j %s`, or re-run the same command to wait for it", array_id)
        return ids

    def _array_script_path(self, points: List[PreparedJob]) -> Path:
        nums = [p.job.job_num for p in points]
        return array_dir(points) / SLURM_DIR / f"array-{min(nums)}-{max(nums)}.sbatch"

    def _dry_run_array(self, prepared: Dict[int, PreparedJob]) -> Dict[int, LaunchResult]:
        results = {i: self.report_dry_run(p) for i, p in prepared.items()}
        new = [p for p in prepared.values() if p.running is None]
        if len(new) > 1:
            script = self._array_script_path(new)
            script.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(script, array_script(self.conf, [p.job for p in new], array_dir(new)))
            print(
                f"Dry run: wrote {script}, the job array of these points; "
                f"submit it by hand with: {shell_command('sbatch', script)}"
            )
            print(script.read_text("utf-8"), end="", flush=True)
        return results

    def _follow_all(self, submitted: Dict[int, SlurmJob]) -> Dict[int, LaunchResult]:
        if submitted and not self.conf.wait:
            for job in submitted.values():
                log.info("submitted %s; launcher.wait=false, not following it", job.name)
            return {i: LaunchResult(exit_code=0, message=f"submitted {job.name}") for i, job in submitted.items()}
        order = sorted(submitted)
        return dict(zip(order, watch([submitted[i] for i in order], self.conf.poll_interval_s)))


def array_dir(points: List[PreparedJob]) -> Path:
    """Where a sweep's array script and the array's own output go: the folder holding its run dirs."""
    return Path(os.path.commonpath([str(p.job.output_dir.parent) for p in points]))


def _note_submitting(run_dir: Path) -> None:
    """Say in the run dir's lock (if this process holds it) that it is held for the job about to be submitted."""

    note_holder(run_dir, launcher_note())


def _warn_if_requeue_cannot_resume(job: JobSpec, task: str) -> None:
    """A requeued training job starts again in the same run dir: only trainer.resume=auto resumes there."""
    trainer = job.cfg.get("trainer")
    resume = str(trainer.get("resume", "auto")).lower() if trainer is not None else "auto"
    if task == "train" and resume != "auto":
        log.warning(
            "trainer.resume=%s: a requeued or resubmitted Slurm job restarts in the same run dir and will %s; "
            "use trainer.resume=auto",
            resume,
            "refuse to touch its checkpoints" if resume == "false" else "fail on its first start",
        )
