"""Who this process is in the job: what every engine's start returns as ``engine.world``, and what the
launcher's environment (Open MPI's or Slurm's) says of it before any engine starts.

A rank is a device. A job is ``processes`` processes of ``devices`` devices each, and trains
``processes x devices`` ranks: each rank trains ``trainer.batch_size`` images a step, walks its own order (or
shard) of the training set, and counts once in the lr's scaling and the epochs' division. engine=jax trains
every device a process has (each of its GPUs, or the CPU devices ``XLA_FLAGS`` makes); the engines that pin
one GPU per process (Horovod, TensorFlow) train one. So 1 process on a host with 8 GPUs, 8 processes of one
GPU each (``launcher=mpirun launcher.np=8``) and 2 hosts of 4 are the same experiment: 8 ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.process_role import RANK_GUARD_ENV
from cifar_dist.training.process.threads import ThreadPlan


class StartedOnceError(CifarDistError, RuntimeError):
    """The environment says this process is one of several, but nothing started the others."""


@dataclass(frozen=True)
class World:
    process: int  # this process's index in the job (0: the chief, which writes)
    processes: int
    local_process: int  # its index among the job's processes on this host
    local_processes: int
    threads: ThreadPlan
    gpu: str  # the GPU(s) this process trains on, or "" on CPU
    onednn: bool  # TensorFlow's CPU ops run on oneDNN (else Eigen)
    devices: int = 1  # the ranks this process trains: one per device

    @property
    def ranks(self) -> int:
        """The job's ranks: every device of every process."""
        return self.processes * self.devices

    @property
    def first_rank(self) -> int:
        """The rank of this process's first device (its devices are ranks first_rank ... first_rank + devices - 1)."""
        return self.process * self.devices

    @property
    def is_chief(self) -> bool:
        return self.process == 0

    def layout(self) -> str:
        """How the ranks are laid out, as the log and metrics.json say it: "2 processes x 2 devices = 4 ranks"."""
        processes = f"{self.processes} process{'es' if self.processes != 1 else ''}"
        devices = f"{self.devices} device{'s' if self.devices != 1 else ''}"
        return f"{processes} x {devices} = {self.ranks} rank{'s' if self.ranks != 1 else ''}"


def under_open_mpi(environ=None) -> bool:
    """Whether this process is a rank Open MPI started (4 and 5 alike set OMPI_COMM_WORLD_SIZE in every rank)."""
    return "OMPI_COMM_WORLD_SIZE" in (os.environ if environ is None else environ)


def processes_from_env(environ=None, pid=None) -> int:
    """How many processes the launcher started (Open MPI's or Slurm's environment; 1 without either)."""
    env = os.environ if environ is None else environ
    if under_open_mpi(env):
        return int(env["OMPI_COMM_WORLD_SIZE"])
    if "SLURM_STEP_NODELIST" in env and "SLURM_PROCID" in env:
        tasks = int(env.get("SLURM_NTASKS", 1))
        if tasks > 1 and started_from_an_interactive_step(env, os.getpid() if pid is None else pid):
            raise StartedOnceError(
                f"this process was started once, from the shell of a Slurm step of {tasks} tasks (srun -n{tasks} "
                f"--pty), which runs only task 0: it would wait for {tasks - 1} more that never start. Start the "
                f"job's processes as the step's tasks (srun -n{tasks} python -m cifar_dist ...), submit it "
                "(launcher=slurm), or run one process outside the step"
            )
        return tasks
    return 1


def started_from_an_interactive_step(environ, pid: int) -> bool:
    """Whether a user started this process from the shell of an interactive Slurm step (``srun --pty``: Slurm sets
    SLURM_PTY_PORT, and the shell, not this process, is the step's task): not a task of the step itself (a task's
    SLURM_TASK_PID is its own pid), nor a rank a launcher started (its wrapper is the task)."""
    started_by_a_launcher = environ.get(RANK_GUARD_ENV) == "1"
    return "SLURM_PTY_PORT" in environ and environ.get("SLURM_TASK_PID") != str(pid) and not started_by_a_launcher


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
