"""Who this process is in the job: what every engine's start returns as ``engine.world``, and what the
launcher's environment (Open MPI's or Slurm's) says of it before any engine starts."""

from __future__ import annotations

import os
from dataclasses import dataclass

from cifar_dist.training.process.threads import ThreadPlan


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    local_size: int
    threads: ThreadPlan
    gpu: str  # the GPU this rank uses, or "" on CPU
    onednn: bool  # TensorFlow's CPU ops run on oneDNN (else Eigen)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0


def under_open_mpi(environ=None) -> bool:
    """Whether this process is a rank Open MPI started (4 and 5 alike set OMPI_COMM_WORLD_SIZE in every rank)."""
    return "OMPI_COMM_WORLD_SIZE" in (os.environ if environ is None else environ)


def processes_from_env(environ=None) -> int:
    """How many processes the launcher started (Open MPI's or Slurm's environment; 1 without either)."""
    env = os.environ if environ is None else environ
    if under_open_mpi(env):
        return int(env["OMPI_COMM_WORLD_SIZE"])
    if "SLURM_STEP_NODELIST" in env and "SLURM_PROCID" in env:
        return int(env.get("SLURM_NTASKS", 1))
    return 1


def local_processes_from_env(environ=None) -> int:
    """How many of the job's processes share this host."""
    env = os.environ if environ is None else environ
    if under_open_mpi(env):
        return int(env.get("OMPI_COMM_WORLD_LOCAL_SIZE", 1))
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE", "") if "SLURM_PROCID" in env else ""
    return int(per_node.split("(")[0].split(",")[0]) if per_node else 1


def local_rank_from_env(environ=None) -> int:
    env = os.environ if environ is None else environ
    if under_open_mpi(env):
        return int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", 0))
    return int(env.get("SLURM_LOCALID", 0)) if "SLURM_PROCID" in env else 0
