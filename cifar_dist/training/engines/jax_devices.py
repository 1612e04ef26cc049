"""Which devices an engine=jax process trains on, and JAX's persistent compilation cache.

GPUs: each process of a job takes its own, decided before JAX starts, from
the environment alone (``choose_gpus``), and logged with the reason; each GPU
a process takes is one rank of the job (``world.py``):

- one process on a host: every GPU it sees;
- several on a host, started by mpirun (Open MPI's local rank) or by Slurm
  without per-task GPUs: the host's visible GPUs split by local rank, G / n
  each (``CUDA_VISIBLE_DEVICES`` narrowed to them); fewer GPUs than processes
  is refused in one line;
- Slurm tasks given their own GPUs (``--gpus-per-task``: Slurm sets
  ``SLURM_GPUS_PER_TASK`` and each task's ``CUDA_VISIBLE_DEVICES``): every GPU
  the task sees.

``trainer.accelerator``: ``auto`` trains on the GPUs when there are any, else
on the CPU; ``gpu`` refuses in one line to start where JAX finds none (no
GPU, or a jaxlib without its CUDA plugin); ``cpu`` hides the GPUs from JAX.

The compilation cache (``trainer.compilation_cache``, a folder; JAX's own
``JAX_COMPILATION_CACHE_DIR`` wins): a second run, or sweep point, of the same
model and shapes loads its compiled programs instead of compiling them again.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Mapping, Optional

from cifar_dist.training.process.gpu_env import (
    VISIBLE,
    GpuChoiceError,
    seen,
    slurm_gave_the_task_its_gpus,
    visible_gpus,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuChoice:
    visible: Optional[str]  # CUDA_VISIBLE_DEVICES for this process; None: as it is
    count: int  # GPUs this process will see (0: CPU)
    reason: str

    @property
    def local_device_ids(self) -> Optional[List[int]]:
        """``jax.distributed.initialize``'s: every GPU this process sees (JAX's default, one by local rank, is
        wrong once CUDA_VISIBLE_DEVICES is narrowed); None on CPU."""
        return list(range(self.count)) if self.count else None


def choose_gpus(environ: Mapping[str, str], local_rank: int, local_size: int, host_gpus: int, accelerator: str):
    """The GPUs of local process ``local_rank`` of ``local_size`` (module docstring)."""
    if accelerator == "cpu":
        return GpuChoice("", 0, "trainer.accelerator=cpu: the GPUs are hidden from JAX")
    gpus = visible_gpus(environ, host_gpus)
    if not gpus:
        if accelerator == "gpu":
            raise GpuChoiceError(
                f"trainer.accelerator=gpu, but process {local_rank} sees no GPU on this host "
                f"({seen(environ)}); run where GPUs are, or use trainer.accelerator=auto"
            )
        return GpuChoice(None, 0, f"no GPU on this host ({seen(environ)}): training on the CPU")
    if local_size == 1:
        return GpuChoice(None, len(gpus), f"the only process on this host: all {len(gpus)} GPU(s) it sees")
    if slurm_gave_the_task_its_gpus(environ):
        return GpuChoice(None, len(gpus), f"Slurm gave this task its own {len(gpus)} GPU(s) (--gpus-per-task)")
    if len(gpus) < local_size:
        raise GpuChoiceError(
            f"{local_size} processes on this host but {len(gpus)} GPU(s) ({seen(environ)}): start at most "
            f"{len(gpus)} per host (launcher.np, launcher.ntasks_per_node), or trainer.accelerator=cpu"
        )
    share = len(gpus) // local_size
    mine = gpus[local_rank * share : (local_rank + 1) * share]
    idle = len(gpus) - share * local_size
    return GpuChoice(
        ",".join(mine),
        share,
        f"local process {local_rank} of {local_size} takes GPU {','.join(mine)} of {len(gpus)} ({share} each"
        + (f"; {idle} idle: start a number of processes per host that divides {len(gpus)})" if idle else ")"),
    )


def apply_gpu_choice(choice: GpuChoice, environ=None) -> None:
    """Set what JAX reads when its GPU backend starts (before its first device query)."""
    environ = os.environ if environ is None else environ
    if choice.visible is not None:
        environ[VISIBLE] = choice.visible
    if choice.count == 0:
        environ["JAX_PLATFORMS"] = "cpu"  # no CUDA plugin start-up (and its warnings) where no GPU is used


def check_backend(jax, choice: GpuChoice, accelerator: str) -> str:
    """After JAX started: its backend ("gpu", "cpu"). A GPU asked for but not found by JAX (a CPU-only jaxlib) is
    refused in one line; with ``trainer.accelerator=auto`` it is said in one line, and the CPU trains."""
    backend = jax.default_backend()
    if choice.count and backend != "gpu":
        install = f"pip install 'jax[cuda13]=={jax.__version__}'"
        if accelerator == "gpu":
            raise GpuChoiceError(
                f"trainer.accelerator=gpu and this host has {choice.count} GPU(s), but JAX {jax.__version__} runs on "
                f"{backend}: install JAX's CUDA plugin ({install})"
            )
        log.warning(
            "this host has %d GPU(s), but JAX %s found none (no CUDA plugin): training on the %s; %s to use them",
            choice.count,
            jax.__version__,
            backend,
            install,
        )
    return backend


def use_compilation_cache(jax, folder: str, environ=None) -> Optional[str]:
    """Turn on JAX's persistent compilation cache in ``folder`` (``trainer.compilation_cache``; "" leaves it
    off; JAX_COMPILATION_CACHE_DIR, JAX's own setting, wins); the folder in use, or None."""
    environ = os.environ if environ is None else environ
    chosen = environ.get("JAX_COMPILATION_CACHE_DIR") or (str(Path(folder).expanduser()) if folder else "")
    if not chosen:
        return None
    jax.config.update("jax_compilation_cache_dir", chosen)
    # Every program, however fast it compiled: evaluation's compile in well under JAX's default second.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return chosen
