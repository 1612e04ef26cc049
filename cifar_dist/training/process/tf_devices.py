"""TensorFlow's devices and thread pools in a rank that trains on TensorFlow (the Horovod and TensorFlow engines).

As Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py sets up each
rank: one GPU per process, chosen by its local rank, with memory growth so
that co-located ranks do not each grab all memory of their GPU; then the CPU
thread pools sized to this rank's share of the host's cores (threads.py).
Both must happen before TensorFlow runs its first op.

One GPU per process is these engines' rank (a rank is a device: ``engines/world.py``): a host with more GPUs
than the job's processes on it leaves the others idle, and its first process says so in one line, with how to
use them. ``trainer.accelerator``: ``auto`` takes the GPU where there is one; ``gpu`` refuses in one line to
train where TensorFlow sees none; ``cpu`` hides the GPUs from TensorFlow.
"""

from __future__ import annotations

import logging
import os
from typing import Optional, Tuple

from cifar_dist.common.errors import CifarDistError
from cifar_dist.training.process.gpu_env import slurm_gave_the_task_its_gpus
from cifar_dist.training.process.tf_console import filtered_native_stderr
from cifar_dist.training.process.threads import ThreadPlan, plan_threads

log = logging.getLogger(__name__)


class GpuCountError(CifarDistError, RuntimeError):
    """This process cannot have the GPU it was asked to train on (more ranks on a host than GPUs, or none)."""


def gpu_of(
    local_rank: int, local_size: int, gpus: int, accelerator: str, tensorflow: str, own: bool = False
) -> Optional[int]:
    """The index of this process's GPU among the ``gpus`` TensorFlow sees (None: the CPU), or one line: the one
    of its local rank where the host's processes share its GPUs, its first where they are its own (``own``:
    Slurm's ``--gpus-per-task``)."""
    if accelerator == "cpu" or (not gpus and accelerator == "auto"):
        return None
    if not gpus:
        raise GpuCountError(
            f"trainer.accelerator=gpu, but TensorFlow {tensorflow} sees no GPU here (none on this host, "
            "CUDA_VISIBLE_DEVICES hides them, or a TensorFlow without CUDA: pip install 'tensorflow[and-cuda]'); "
            "run where GPUs are, or use trainer.accelerator=auto"
        )
    if own:
        return 0
    if local_rank >= gpus:
        raise GpuCountError(
            f"{local_size} ranks on this host but {gpus} GPU(s): "
            f"start at most {gpus} ranks per host (launcher.np / hosts slots)"
        )
    return local_rank


def idle_gpus_line(engine: str, local_size: int, gpus: int, own: bool = False) -> Optional[str]:
    """What the first process on a host says when the job leaves some of the host's GPUs idle (one per process;
    ``own``: each process was given ``gpus`` of its own, Slurm's ``--gpus-per-task``)."""
    if own and gpus > 1:
        return (
            f"each Slurm task was given {gpus} GPUs (--gpus-per-task) and engine={engine} trains one per process: "
            f"{gpus - 1} idle in each; give each task one (launcher.gpus_per_task=1) and {gpus}x the tasks, or use "
            "engine=jax, whose processes train every GPU they are given"
        )
    if own or gpus <= local_size:
        return None
    return (
        f"this host has {gpus} GPUs and engine={engine} trains one per process: {local_size} process(es) here "
        f"use {local_size}, {gpus - local_size} idle; train on all of them with launcher=mpirun launcher.np={gpus} "
        f"(or engine=jax, whose processes train every GPU they are given)"
    )


def use_gpu_and_threads(
    local_rank: int,
    local_size: int,
    host_ranks: int,
    intra_op_threads: int = 0,
    inter_op_threads: int = 0,
    accelerator="auto",
    engine: str = "horovod",
) -> Tuple[str, ThreadPlan]:
    """This process's GPU (the one of its local rank; "" on CPU) and its thread pools, set in TensorFlow.

    ``local_size``: the job's processes on this host (one GPU each); ``host_ranks``: every process on this
    host that shares its cores (in a concurrent sweep, the other groups' ranks too); ``accelerator``:
    ``trainer.accelerator``; ``engine``: the engine's name, as the idle-GPU line says it."""
    import tensorflow as tf  # lazy: TensorFlow (the engine's start loaded it, with its CPU kernels chosen)

    with filtered_native_stderr():  # "failed call to cuInit" on CPU machines
        gpus = tf.config.list_physical_devices("GPU")
    wanted, own = str(getattr(accelerator, "value", accelerator)), slurm_gave_the_task_its_gpus(os.environ)
    mine = gpu_of(local_rank, local_size, len(gpus), wanted, tf.__version__, own)
    if mine is None:
        if gpus:  # trainer.accelerator=cpu
            tf.config.set_visible_devices([], "GPU")
        gpu_name = ""
    else:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpus[mine], "GPU")
        gpu_name = gpus[mine].name
        idle = idle_gpus_line(engine, local_size, len(gpus), own)
        if idle and local_rank == 0:
            log.warning("%s", idle)
    plan = plan_threads(host_ranks, intra_op_threads, inter_op_threads)
    tf.config.threading.set_intra_op_parallelism_threads(plan.intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(plan.inter_op)
    return gpu_name, plan
