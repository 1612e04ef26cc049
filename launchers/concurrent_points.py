"""Several sweep points at once inside one mpirun: ``launcher.concurrent=k``.

The sweep launcher hands ``MpirunLauncher.launch_all`` every point of a sweep
batch that has the same launcher settings. With ``launcher.concurrent=k`` it
cuts them into *batches* of k points (``run_batches``) and runs each batch as
ONE mpirun in OpenMPI's MPMD form::

    mpirun --enable-recovery <placement> -np N <rank_exec --mpi-group 0 ... point a> \\
        : -np N <... --mpi-group 1 ... point b>

so world ranks ``g*N .. g*N+N-1`` are group g. Each rank's wrapper tells the
job its group, ``join_horovod`` splits MPI_COMM_WORLD by it (mpi4py) and
initialises Horovod on the group's communicator (training/process/mpi_groups.py):
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
import dataclasses
import importlib.util
import logging
import shlex
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.results import read_results
from cifar_dist.config.override_syntax import rerun_hint, shell_command
from cifar_dist.launchers.base import JobSpec, LaunchError, LaunchResult
from cifar_dist.launchers.multirank import RUNNER_LOG, MultiRankLauncher
from cifar_dist.launchers.ranks.hosts import check_slots
from cifar_dist.launchers.ranks.rank_env import LOG_DIR
from cifar_dist.launchers.ranks.rank_exec import marker_prefix
from cifar_dist.launchers.ranks.rank_failure import first_failure, read_exit_records
from cifar_dist.launchers.ranks.runner_supervisor import Supervisor
from cifar_dist.rundir.ranks_lock import current_launch

log = logging.getLogger(__name__)


def run_batches(launcher: MultiRankLauncher, jobs: Sequence[JobSpec]) -> List[LaunchResult]:
    """Every point, ``launcher.concurrent`` at a time, one mpirun per batch; results in order."""
    check(launcher)
    k = launcher.conf.concurrent
    results: List[LaunchResult] = []
    for start in range(0, len(jobs), k):
        batch = Batch(launcher, jobs[start : start + k])
        try:
            results += batch.run()
        except CifarDistError as exc:  # e.g. mpirun missing: every point of the batch fails with it
            log.error("points %s failed: %s", batch.points(), exc)
            results += [LaunchResult(exit_code=2, message=str(exc)) for _ in batch.jobs]
    return results


class Batch:
    """Up to k sweep points that run side by side in one mpirun, one MPI group each."""

    def __init__(self, launcher: MultiRankLauncher, jobs: Sequence[JobSpec]):
        self.launcher = launcher
        self.jobs: List[JobSpec] = list(jobs)

    # ---- the mpirun ----------------------------------------------------------------
    def runner(self) -> MultiRankLauncher:
        """The launcher as this batch's mpirun sees it: np = every rank of every group,
        so that the slot check and core binding count them all."""
        runner = copy.copy(self.launcher)
        runner.conf = dataclasses.replace(self.launcher.conf, np=self.launcher.conf.np * len(self.jobs))
        return runner

    def command(self, env: Optional[dict] = None) -> List[str]:
        runner = self.runner()
        env = env if env is not None else runner.environment(*self.jobs)
        contexts: List[Tuple[int, List[str]]] = [
            (self.launcher.conf.np, runner.rank_command(job, group=g, group_size=self.launcher.conf.np))
            for g, job in enumerate(self.jobs)
        ]
        return runner.mpmd_command(contexts, runner.forwarded_names(env))

    def points(self) -> str:
        return ", ".join(f"#{job.job_num}" for job in self.jobs)

    def run(self) -> List[LaunchResult]:
        runner = self.runner()
        if self.launcher.conf.dry_run:
            check_slots(runner.conf.np, runner.hosts, runner.conf.oversubscribe)
            print(f"Dry run: one mpirun for points {self.points()} (nothing started):")
            print(shell_command(*self.command()), flush=True)
            return [LaunchResult(exit_code=0, message="dry run: nothing started") for _ in self.jobs]
        runner.preflight()
        env = runner.environment(*self.jobs)
        argv = self.command(env)
        for job in self.jobs:
            (job.output_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        runner_log = self.jobs[0].output_dir / LOG_DIR / RUNNER_LOG
        log.info(
            "concurrent sweep: points %s in one mpirun, %d group(s) of %d rank(s) (its output: %s): %s",
            self.points(),
            len(self.jobs),
            self.launcher.conf.np,
            runner_log,
            shlex.join(argv),
        )
        started = time.time()
        outcome = Supervisor(
            argv,
            cwd=self.jobs[0].original_cwd,
            env=env,
            log_file=runner_log,
            kill_grace_s=self.launcher.conf.kill_grace_s,
            watch=lambda: self.stuck(started),
        ).run()
        if outcome.interrupted:
            log.error("interrupted: all ranks of points %s stopped; re-run the sweep to resume them", self.points())
            raise KeyboardInterrupt  # end the whole sweep, as Ctrl-C does without a launcher
        stopped = outcome.stopped_reason or (
            f"mpirun exited with code {outcome.returncode}" if outcome.returncode else ""
        )
        return [self.point_result(job, started, stopped, runner_log) for job in self.jobs]

    def point_result(self, job: JobSpec, started: float, stopped: str, runner_log: Path) -> LaunchResult:
        log_dir = job.output_dir / LOG_DIR
        launch = current_launch(job.output_dir)
        records = read_exit_records(log_dir, self.launcher.conf.np, started, launch)
        if any(r.get("exit_code") for r in records):
            failure = first_failure(log_dir, self.launcher.conf.np, started, "", launch)
            return LaunchResult(exit_code=1, message=f"point #{job.job_num}: {failure.message(job.output_dir)}")
        if len(records) == self.launcher.conf.np and not stopped:
            return LaunchResult(exit_code=0, metrics=read_results(job.output_dir))
        why = stopped or "some of its ranks left no exit record"
        return LaunchResult(
            exit_code=1,
            message=(
                f"point #{job.job_num} was stopped with the other points of its mpirun ({self.points()}): {why}; "
                f"see {runner_log}; {rerun_hint(job.output_dir)} to resume it"
            ),
        )

    def stuck(self, started: float) -> str:
        """Why the mpirun must be stopped because some ranks would otherwise wait forever ('' if none)."""
        grace = self.launcher.conf.rank_failure_grace_s
        now = time.time()
        for job in self.jobs:
            log_dir = job.output_dir / LOG_DIR
            records = read_exit_records(log_dir, self.launcher.conf.np, started, current_launch(job.output_dir))
            ended = {int(r["rank"]) for r in records}
            for record in records:
                if now - record["time"] < grace:
                    continue
                rank = int(record["rank"])
                if not Path(f"{marker_prefix(log_dir, rank)}.joined").exists():
                    return (
                        f"rank {rank} of point #{job.job_num} ended before joining its MPI group "
                        "(every other rank would wait for it forever)"
                    )
                if record.get("exit_code"):
                    waiting = [
                        r
                        for r in range(self.launcher.conf.np)
                        if r not in ended and not Path(f"{marker_prefix(log_dir, r)}.left").exists()
                    ]
                    if waiting:
                        return (
                            f"rank {rank} of point #{job.job_num} failed {grace:g}s ago and its rank(s) "
                            f"{waiting} never finished (stuck in a collective with it)"
                        )
        return ""


def check(launcher: MultiRankLauncher) -> None:
    """One-line errors for a concurrent sweep that cannot work, before any mpirun starts."""
    if importlib.util.find_spec("mpi4py") is None:
        raise LaunchError("launcher.concurrent needs mpi4py: pip install 'cifar_dist[mpi]' (or pip install mpi4py)")
    check_slots(launcher.conf.np * launcher.conf.concurrent, launcher.hosts, launcher.conf.oversubscribe)
