"""What a process's environment says of its GPUs, read before any CUDA library loads: the host's NVIDIA GPUs (their
device files), the ones ``CUDA_VISIBLE_DEVICES`` lets it see, and whether Slurm gave its task GPUs of its own.

The one home of these readings: engine=auto's choice (``engines/choice.py``), the JAX engine's GPU choice
(``engines/jax_devices.py``) and the TensorFlow-run engines' (``tf_devices.py``) all ask here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Mapping

from cifar_dist.common.errors import CifarDistError

VISIBLE = "CUDA_VISIBLE_DEVICES"


class GpuChoiceError(CifarDistError, RuntimeError):
    """This process cannot have the GPUs it was asked to train on."""


def host_gpu_count(dev: Path = Path("/dev")) -> int:
    """NVIDIA GPUs of this host, by their device files (``/dev/nvidia0`` ...): known before any CUDA library loads."""
    return sum(1 for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))


def visible_gpus(environ: Mapping[str, str], host_gpus: int) -> List[str]:
    """The GPU ids this process may see: CUDA_VISIBLE_DEVICES's list where it is set, else the host's; none on a
    host without NVIDIA GPUs, whatever CUDA_VISIBLE_DEVICES says. An index the host does not have is refused in
    one line (CUDA numbers the GPUs a process may open 0 ... n-1; UUIDs and MIG names are taken as they are)."""
    if not host_gpus:
        return []
    if VISIBLE not in environ:
        return [str(i) for i in range(host_gpus)]
    listed = [g.strip() for g in environ[VISIBLE].split(",") if g.strip()]
    listed = [g for g in listed if g not in ("-1", "NoDevFiles")]
    missing = [g for g in listed if g.isdigit() and int(g) >= host_gpus]
    if missing:
        raise GpuChoiceError(
            f"{VISIBLE}={environ[VISIBLE]!r} names GPU {','.join(missing)}, but this host has {host_gpus} "
            f"(/dev/nvidia0 ... /dev/nvidia{host_gpus - 1}); list GPUs 0 to {host_gpus - 1}, or unset {VISIBLE}"
        )
    return listed


def seen(environ: Mapping[str, str]) -> str:
    """What decided which GPUs a process sees, as an error line says it."""
    return f"{VISIBLE}={environ[VISIBLE]!r}" if VISIBLE in environ else "no /dev/nvidia<N>"


def slurm_gave_the_task_its_gpus(environ: Mapping[str, str]) -> bool:
    """Whether this is a Slurm task given GPUs of its own (``--gpus-per-task``: Slurm sets SLURM_GPUS_PER_TASK
    and binds each task's CUDA_VISIBLE_DEVICES), rather than one sharing its node's GPUs with the node's tasks."""
    return "SLURM_GPUS_PER_TASK" in environ and "SLURM_PROCID" in environ
