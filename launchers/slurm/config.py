"""The Slurm launcher's config option ``launcher=slurm`` (docs/slurm.md lists every key).

Imported at every start (``launchers.register_built_in()``, which stores the schema): light imports only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Mapping, Optional

from cifar_dist.config.options import config_option
from cifar_dist.launchers.base import LaunchError


class OnInterrupt(str, Enum):
    cancel = "cancel"  # Ctrl-C cancels the job (scancel)
    detach = "detach"  # Ctrl-C leaves it queued/running; re-run the same command to follow it again


class RankStarter(str, Enum):
    srun = "srun"  # srun --mpi=<mpi>: Slurm starts the ranks (its MPI guide's recommended way)
    mpirun = "mpirun"  # OpenMPI's mpirun inside the allocation (it reads the allocation from Slurm)


@config_option("launcher", "slurm")
@dataclass
class SlurmLauncherConf:
    """``launcher=slurm``: run the job as a Slurm batch job: sbatch, ranks started with
    srun --mpi=pmix, or --mpi=none for engine=jax (docs/slurm.md)::

        python -m cifar_dist launcher=slurm launcher.nodes=2 launcher.gpus_per_node=4 launcher.partition=gpu \\
            launcher.time_min=120   # 8 ranks: one process per GPU (ntasks_per_node null)
        python -m cifar_dist launcher=slurm launcher.dry_run=true   # write <run dir>/slurm/job.sbatch and print it
        # one job array, 2 points at a time:
        python -m cifar_dist -m optimizer.lr=1e-4,2e-4 launcher=slurm launcher.concurrent=2
    """

    _target_: str = "cifar_dist.launchers.slurm.launcher.SlurmLauncher"

    # --- the allocation: one #SBATCH line each (null/0/empty: not written, Slurm's default) ---
    nodes: int = 1
    # Processes of the job per node; null: one per GPU the job asks a node for (gpus_per_node, or gres's count), else
    # 1. A rank is a device: each process trains the GPUs it gets (docs/slurm.md, "GPUs: one process per GPU or one
    # per node").
    ntasks_per_node: Optional[int] = None
    cpus_per_task: Optional[int] = None  # cores per process
    gpus_per_node: int = 0  # --gpus-per-node: the node's GPUs, shared by its tasks (each process takes its share)
    gpus_per_task: int = 0  # --gpus-per-task: each task its own GPUs, bound by Slurm
    gres: Optional[str] = None  # instead of gpus_per_node on clusters that want --gres=gpu:<type>:<n>
    mem_gb: Optional[float] = None  # memory per node
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time_min: int = 60  # the job's time limit, minutes
    constraint: Optional[str] = None
    exclusive: bool = False
    job_name: str = "cifar_dist"
    sbatch_lines: List[str] = field(default_factory=list)  # more options, e.g. ["--reservation=r1"]
    # --- what runs inside it ---
    setup: List[str] = field(default_factory=list)  # shell lines before the ranks (module load, source venv)
    # Exported in the batch script; a secret-named one is passed to sbatch in its environment, never written there.
    env: Dict[str, str] = field(default_factory=dict)
    # sbatch --export: ALL (Slurm's default: this shell's environment), NONE, or variable names.
    forward_env: List[str] = field(default_factory=lambda: ["ALL"])
    ranks: RankStarter = RankStarter.srun
    # srun --mpi. auto: none for engine=jax (JAX meets its peers through Slurm's own variables; no MPI in the ranks,
    # so a Slurm without the PMIx plugin, such as Debian 14's 26.05, runs it), pmix for the engines over MPI
    # (Debian's OpenMPI is built with PMIx only: pmi2 fails).
    mpi: str = "auto"
    srun_args: List[str] = field(default_factory=list)
    mpirun_args: List[str] = field(default_factory=list)
    python: Optional[str] = None  # interpreter on the nodes (default: this one; same path everywhere)
    # HOROVOD_STALL_SHUTDOWN_TIME_SECONDS for the ranks, as launcher=mpirun sets it; 0: Horovod's default.
    stall_shutdown_s: int = 120
    # --- preemption and time limits ---
    requeue: bool = True  # sbatch --requeue: a preempted job goes back to the queue and resumes
    # Seconds before the time limit when Slurm sends USR1 to the batch script (--signal=B:USR1@N): the
    # ranks stop at the end of the epoch (a checkpoint) and the job requeues itself. 0: no signal.
    signal_grace_s: int = 180
    max_resubmits: int = 3  # times a job that ran out of time goes on (self-requeue or resubmission)
    # A sweep's points are one job array (sbatch --array=0-(N-1)%k): at most k of them run at once; 0: no limit.
    concurrent: int = 0
    # --- following it ---
    dry_run: bool = False  # write the batch script into the run dir and print it; submit nothing
    wait: bool = True  # false: submit, say how to follow the job, return
    poll_interval_s: float = 5.0
    on_interrupt: OnInterrupt = OnInterrupt.cancel
    stream_output: bool = True  # echo rank 0's output (the job's output file) as it grows
    log_tail_lines: int = 15  # lines of a failed rank's log in the error

    @property
    def tasks_per_node(self) -> int:
        """``ntasks_per_node``, or where it is null one task per GPU a node is asked for (one process per GPU: what
        JAX's docs recommend and Horovod needs), else one."""
        if self.ntasks_per_node is not None:
            return int(self.ntasks_per_node)
        return 1 if self.gpus_per_task else max(1, node_gpus(self))

    @property
    def world_size(self) -> int:
        """The job's processes (its ranks are their devices: each process's GPUs, or one where it has none)."""
        return self.nodes * self.tasks_per_node


def node_gpus(conf: SlurmLauncherConf) -> int:
    """The GPUs the job asks each node for: ``gpus_per_node``, or the count of a ``gres`` of GPUs (``gpu:4``,
    ``gpu:a100:4``; ``gpu`` alone is one), else 0 (``gpus_per_task``'s are per task)."""
    if conf.gpus_per_node:
        return int(conf.gpus_per_node)
    for item in (conf.gres or "").split(","):
        fields = item.strip().split(":")
        if fields[0] == "gpu":
            return int(fields[-1]) if len(fields) > 1 and fields[-1].isdigit() else 1
    return 0


def conf_from_kwargs(kwargs: Mapping[str, object]) -> SlurmLauncherConf:
    """The dataclass from what Hydra's instantiate passed (enums may arrive as strings)."""
    conf = SlurmLauncherConf(**{k: v for k, v in kwargs.items() if not k.startswith("_")})
    conf.on_interrupt = OnInterrupt(conf.on_interrupt)
    conf.ranks = RankStarter(conf.ranks)
    conf.env = {str(k): str(v) for k, v in dict(conf.env or {}).items()}
    conf.forward_env = [str(v) for v in conf.forward_env or []]
    return conf


def check(conf: SlurmLauncherConf) -> None:
    """Every bad value at once, as one line that says what to do."""
    found = problems(conf)
    if found:
        raise LaunchError("; ".join(found))


def problems(conf: SlurmLauncherConf) -> List[str]:
    """Each bad value, one phrase each."""
    problems = []
    for name in ("nodes", "time_min"):
        if int(getattr(conf, name)) < 1:
            problems.append(f"launcher.{name}={getattr(conf, name)} must be >= 1")
    if conf.ntasks_per_node is not None and conf.ntasks_per_node < 1:
        problems.append(f"launcher.ntasks_per_node={conf.ntasks_per_node} must be >= 1 (or null: one per GPU)")
    for name in ("gpus_per_node", "gpus_per_task", "signal_grace_s", "max_resubmits", "stall_shutdown_s", "concurrent"):
        if int(getattr(conf, name)) < 0:
            problems.append(f"launcher.{name}={getattr(conf, name)} must be >= 0")
    if conf.cpus_per_task is not None and conf.cpus_per_task < 1:
        problems.append(f"launcher.cpus_per_task={conf.cpus_per_task} must be >= 1 (or null)")
    if conf.mem_gb is not None and conf.mem_gb <= 0:
        problems.append(f"launcher.mem_gb={conf.mem_gb} must be > 0 (or null)")
    asked = [f"launcher.{name}" for name in ("gpus_per_node", "gpus_per_task", "gres") if getattr(conf, name)]
    if len(asked) > 1:
        problems.append(f"set one of {' and '.join(asked)}: each asks Slurm for the job's GPUs")
    if conf.signal_grace_s >= conf.time_min * 60:
        problems.append(
            f"launcher.signal_grace_s={conf.signal_grace_s} must be below the time limit ({conf.time_min} min)"
        )
    if conf.poll_interval_s <= 0:
        problems.append(f"launcher.poll_interval_s={conf.poll_interval_s} must be > 0")
    bad_env = [k for k in conf.env if not k.replace("_", "a").isalnum() or k[:1].isdigit()]
    if bad_env:
        problems.append(f"launcher.env names {bad_env} are not shell variable names")
    return problems
