"""Run the job on N ranks (processes of one job, on its engine: horovod or jax) under OpenMPI's ``mpirun``.

``python -m cifar_dist launcher=mpirun launcher.np=2`` re-invokes the same
job (same overrides, same run dir, in-process launcher inside) as
``mpirun -np 2 ... python -m cifar_dist.launchers.ranks.rank_exec ... -- python -m
cifar_dist <overrides>``, in the spirit of Horovod's documented
``mpirun -np 4 -H server1:2,server2:2 -bind-to ... -x VAR python train.py``.
Locally each rank is bound to cores/np cores (``--map-by slot:PE=k --bind-to
core``), which is what lets TensorFlow size its thread pools per rank.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from cifar_dist.config.options import config_option
from cifar_dist.launchers.base import JobSpec, LaunchResult
from cifar_dist.launchers.concurrent_points import run_batches
from cifar_dist.launchers.multirank import MultiRankConf, MultiRankLauncher


@config_option("launcher", "mpirun")
@dataclass
class MpirunLauncherConf(MultiRankConf):
    """``launcher=mpirun``: run the job on launcher.np ranks under OpenMPI's mpirun::

        python -m cifar_dist launcher=mpirun launcher.np=2
        python -m cifar_dist launcher=mpirun launcher.np=8 'launcher.hosts=[h1:4,h2:4]'
        python -m cifar_dist launcher=mpirun launcher.dry_run=true   # print the command only

    Every rank logs to <run dir>/logs/rank.N.log; rank 0 also streams to this
    console. The keys shared with launcher=gloo: MultiRankConf; docs/launchers.md."""

    _target_: str = "cifar_dist.launchers.mpirun.MpirunLauncher"
    mpirun: str = "mpirun"  # the executable (a name on PATH or a path)
    # Replaces ssh for starting OpenMPI's daemons on other hosts
    # (--mca plm_rsh_agent), e.g. "ssh -p 2222" or a script.
    rsh_agent: Optional[str] = None
    # --mca mpi_yield_when_idle 1: a rank waiting in MPI yields its core
    # instead of busy-polling it, which matters when each rank has one core
    # and the Horovod thread shares it with TensorFlow (docs/scaling.md).
    yield_when_idle: bool = True


class MpirunLauncher(MultiRankLauncher):
    runner_name = "mpirun"

    conf_class = MpirunLauncherConf
    splits_into_groups = True  # launchers/concurrent_points.py

    def launch_all(self, jobs: Sequence[JobSpec]) -> List[LaunchResult]:
        """launcher.concurrent=k: k points at a time, each its own MPI group of one MPMD mpirun."""
        if self.conf.concurrent > 1:
            return run_batches(self, jobs)
        return super().launch_all(jobs)

    def runner_executable(self) -> str:
        return self.conf.mpirun

    def missing_runner_hint(self) -> str:
        return (
            "install OpenMPI (apt-get install openmpi-bin), set launcher.mpirun=/path/to/mpirun, or use launcher=gloo"
        )

    def remote_shell(self) -> List[str]:
        if self.conf.rsh_agent:
            return self.conf.rsh_agent.split()
        return super().remote_shell()

    def binds_itself(self) -> bool:
        return True

    def binding_args(self) -> List[str]:
        per_rank = self.cores_per_rank()
        if not per_rank:
            return ["--bind-to", "none", "--map-by", "slot"]
        return ["--map-by", f"slot:PE={per_rank}", "--bind-to", "core"]

    def _placement_args(self) -> List[str]:
        argv = []
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if self.conf.hostfile:
            argv += ["--hostfile", os.path.expanduser(self.conf.hostfile)]
        elif self.hosts:
            argv += ["-H", ",".join(h.spec() for h in self.hosts)]
        argv += self.binding_args()
        if self.conf.oversubscribe:
            argv.append("--oversubscribe")
        if self.conf.rsh_agent:
            argv += ["--mca", "plm_rsh_agent", self.conf.rsh_agent]
        if self.conf.yield_when_idle:
            argv += ["--mca", "mpi_yield_when_idle", "1"]
        return argv

    @staticmethod
    def _export_args(forwarded: List[str]) -> List[str]:
        return [arg for name in forwarded for arg in ("-x", name)]

    def runner_command(self, rank_command: List[str], forwarded: List[str]) -> List[str]:
        argv = [self.conf.mpirun, "-np", str(self.conf.np), *self._placement_args(), *self._export_args(forwarded)]
        return argv + self.conf.extra_args + rank_command

    def mpmd_command(self, contexts: List[Tuple[int, List[str]]], forwarded: List[str]) -> List[str]:
        """One mpirun, several programs (OpenMPI's MPMD form ``A : B``), one MPI_COMM_WORLD.

        ``contexts`` are (ranks, command) in world-rank order. Placement and
        binding are global options; ``-x`` applies per program in OpenMPI, so
        it is repeated for each. ``--enable-recovery`` keeps mpirun from
        aborting every program when one rank dies (concurrent sweeps).
        """
        argv = [self.conf.mpirun, "--enable-recovery", *self._placement_args(), *self.conf.extra_args]
        for i, (ranks, command) in enumerate(contexts):
            argv += ([":"] if i else []) + ["-np", str(ranks), *self._export_args(forwarded), *command]
        return argv
