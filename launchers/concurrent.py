"""Several sweep points at once inside one mpirun: ``launcher.concurrent=k``.

Hydra's basic sweeper calls the app once per point, one after another. With
``launcher=mpirun launcher.concurrent=k`` the launcher does not run a point
when it is called: it puts it into the open *batch* (a new batch every k
points, or when the point's launcher settings differ) and registers it as a
``PendingJob``, which takes Hydra a fraction of a second per point. When the
sweep ends, the sweep-summary callback drains the pending points; waiting on
the first point of a batch runs the whole batch as ONE mpirun in OpenMPI's
MPMD form::

    mpirun --enable-recovery <placement> -np N <rank_exec --mpi-group 0 ... point a> : -np N <... --mpi-group 1 ... point b>

so world ranks ``g*N .. g*N+N-1`` are group g. Each rank's wrapper tells the
job its group, ``init_world`` splits MPI_COMM_WORLD by it (mpi4py) and
initialises Horovod on the group's communicator (training/mpi_groups.py):
k independent Horovod worlds of N ranks, each training its own point in its
own run dir. Batches run one after another; the last one holds the
remaining ``n mod k`` points and simply has fewer groups (fewer ranks, each
bound to more cores), so every point runs and no rank waits for a point that
does not exist.

Failures stay with their point: the wrappers of a concurrent mpirun always
exit 0 and mpirun runs with ``--enable-recovery``, so neither a failing nor a
killed rank makes mpirun abort the other groups; each point's result comes
from its own ranks' exit records. Two situations would leave ranks waiting
forever, and stop the whole mpirun instead (every point of the batch is then
reported failed, with the reason): a rank that ended before joining its group
(the others wait for it in MPI_Init / the split), and a point whose rank died
while its other ranks never finish (stuck in a collective with the dead one).
"""
from __future__ import annotations

import copy
import importlib.util
import logging
import shlex
import time
from pathlib import Path
from typing import List, Optional, Tuple

from cifar_dist.errors import CifarDistError
from cifar_dist.launchers.base import JobSpec, LaunchError, LaunchResult, PendingJob, register_pending
from cifar_dist.launchers.hosts import check_slots
from cifar_dist.launchers.multirank import LOG_DIR, RUNNER_LOG, MultiRankLauncher, _read_metrics

log = logging.getLogger(__name__)


class Batch:
    """Up to k sweep points that run side by side in one mpirun, one MPI group each."""

    def __init__(self, launcher: MultiRankLauncher):
        self.launcher = launcher
        self.signature = settings_signature(launcher)
        self.jobs: List[JobSpec] = []
        self.results: Optional[List[LaunchResult]] = None

    @property
    def open(self) -> bool:
        return self.results is None and len(self.jobs) < self.launcher.concurrent

    def add(self, job: JobSpec) -> "BatchPoint":
        self.jobs.append(job)
        return BatchPoint(self, len(self.jobs) - 1)

    def result(self, group: int) -> LaunchResult:
        if self.results is None:
            try:
                self.results = self.run()
            except CifarDistError as exc:  # e.g. mpirun missing: every point of the batch fails with it
                self.results = [LaunchResult(exit_code=2, message=str(exc)) for _ in self.jobs]
        return self.results[group]

    # ---- the mpirun ----------------------------------------------------------------
    def runner(self) -> MultiRankLauncher:
        """The launcher as this batch's mpirun sees it: np = every rank of every group,
        so that the slot check and core binding count them all."""
        runner = copy.copy(self.launcher)
        runner.np = self.launcher.np * len(self.jobs)
        return runner

    def command(self, env: Optional[dict] = None) -> List[str]:
        runner = self.runner()
        env = env if env is not None else runner.environment()
        contexts: List[Tuple[int, List[str]]] = [
            (self.launcher.np, runner.rank_command(job, group=g, group_size=self.launcher.np))
            for g, job in enumerate(self.jobs)
        ]
        return runner.mpmd_command(contexts, runner.forwarded_names(env))

    def points(self) -> str:
        return ", ".join(f"#{job.job_num}" for job in self.jobs)

    def run(self) -> List[LaunchResult]:
        from cifar_dist.launchers.supervise import Supervisor

        runner = self.runner()
        if self.launcher.dry_run:
            check_slots(runner.np, runner.hosts, runner.oversubscribe)
            print(shlex.join(self.command()), flush=True)
            return [LaunchResult(exit_code=0, message="dry run: nothing started") for _ in self.jobs]
        runner.preflight()
        env = runner.environment()
        argv = self.command(env)
        for job in self.jobs:
            (job.output_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        runner_log = self.jobs[0].output_dir / LOG_DIR / RUNNER_LOG
        log.info("concurrent sweep: points %s in one mpirun, %d group(s) of %d rank(s) (its output: %s): %s",
                 self.points(), len(self.jobs), self.launcher.np, runner_log, shlex.join(argv))
        started = time.time()
        outcome = Supervisor(
            argv, cwd=self.jobs[0].original_cwd, env=env, log_file=runner_log,
            kill_grace_s=self.launcher.kill_grace_s, watch=lambda: self.stuck(started),
        ).run()
        if outcome.interrupted:
            log.error("interrupted: all ranks of points %s stopped; re-run the sweep to resume them", self.points())
            raise KeyboardInterrupt  # end the whole sweep, as Ctrl-C does without a launcher
        stopped = outcome.stopped_reason or (
            f"mpirun exited with code {outcome.returncode}" if outcome.returncode else "")
        return [self.point_result(job, started, stopped, runner_log) for job in self.jobs]

    def point_result(self, job: JobSpec, started: float, stopped: str, runner_log: Path) -> LaunchResult:
        from cifar_dist.launchers.failure import first_failure, read_exit_records

        log_dir = job.output_dir / LOG_DIR
        records = read_exit_records(log_dir, self.launcher.np, started)
        if any(r.get("exit_code") for r in records):
            failure = first_failure(log_dir, self.launcher.np, started, "")
            return LaunchResult(exit_code=1, message=f"point #{job.job_num}: {failure.message(job.output_dir)}")
        if len(records) == self.launcher.np and not stopped:
            return LaunchResult(exit_code=0, metrics=_read_metrics(job.output_dir))
        why = stopped or "some of its ranks left no exit record"
        return LaunchResult(exit_code=1, message=(
            f"point #{job.job_num} was stopped with the other points of its mpirun ({self.points()}): {why}; "
            f"see {runner_log}; re-run with hydra.run.dir={job.output_dir} to resume it"))

    def stuck(self, started: float) -> str:
        """Why the mpirun must be stopped because some ranks would otherwise wait forever ('' if none)."""
        from cifar_dist.launchers.failure import read_exit_records
        from cifar_dist.launchers.rank_exec import marker_prefix

        grace = self.launcher.rank_failure_grace_s
        now = time.time()
        for job in self.jobs:
            log_dir = job.output_dir / LOG_DIR
            records = read_exit_records(log_dir, self.launcher.np, started)
            ended = {int(r["rank"]) for r in records}
            for record in records:
                if now - record["time"] < grace:
                    continue
                rank = int(record["rank"])
                if not Path(f"{marker_prefix(log_dir, rank)}.joined").exists():
                    return (f"rank {rank} of point #{job.job_num} ended before joining its MPI group "
                            "(every other rank would wait for it forever)")
                if record.get("exit_code"):
                    waiting = [r for r in range(self.launcher.np) if r not in ended
                               and not Path(f"{marker_prefix(log_dir, r)}.left").exists()]
                    if waiting:
                        return (f"rank {rank} of point #{job.job_num} failed {grace:g}s ago and its rank(s) "
                                f"{waiting} never finished (stuck in a collective with it)")
        return ""


class BatchPoint(PendingJob):
    """One sweep point of a batch; waiting on it runs its batch (once)."""

    def __init__(self, batch: Batch, group: int):
        self.batch = batch
        self.group = group
        self.output_dir = batch.jobs[group].output_dir

    def wait(self) -> LaunchResult:
        return self.batch.result(self.group)


_open_batch: Optional[Batch] = None


def settings_signature(launcher: MultiRankLauncher) -> Tuple:
    """Points share an mpirun only when their launcher settings are equal."""
    return tuple(sorted((k, repr(v)) for k, v in vars(launcher).items() if not k.startswith("_")))


def check(launcher: MultiRankLauncher) -> None:
    """One-line errors for a concurrent sweep that cannot work, before anything is queued."""
    if launcher.concurrent < 1:
        raise LaunchError(f"launcher.concurrent={launcher.concurrent} must be >= 1 (points run at once)")
    if not hasattr(launcher, "mpmd_command"):
        raise LaunchError(f"launcher.concurrent needs launcher=mpirun: {launcher.runner_name} starts one Horovod "
                          "world that cannot be split into groups; use launcher=mpirun or launcher.concurrent=1")
    if importlib.util.find_spec("mpi4py") is None:
        raise LaunchError("launcher.concurrent needs mpi4py: pip install 'cifar_dist[mpi]' (or pip install mpi4py)")
    check_slots(launcher.np * launcher.concurrent, launcher.hosts, launcher.oversubscribe)


def enqueue(launcher: MultiRankLauncher, job: JobSpec) -> LaunchResult:
    """Queue one sweep point into the open batch; it runs when the sweep drains its pending jobs."""
    global _open_batch
    check(launcher)
    if _open_batch is None or not _open_batch.open or _open_batch.signature != settings_signature(launcher):
        _open_batch = Batch(launcher)
    point = _open_batch.add(job)
    register_pending(point)
    log.info("point #%d queued as group %d of a concurrent mpirun (runs at the end of the sweep, %d at a time)",
             job.job_num, point.group, launcher.concurrent)
    return LaunchResult(exit_code=0, message="queued")
