"""TensorFlow's devices and thread pools in a rank that trains on TensorFlow (the Horovod and TensorFlow engines).

As Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py sets up each
rank: one GPU per process, chosen by its local rank, with memory growth so
that co-located ranks do not each grab all memory of their GPU; then the CPU
thread pools sized to this rank's share of the host's cores (threads.py).
Both must happen before TensorFlow runs its first op. (The JAX engine feeds
its data with TensorFlow but trains on JAX: it hides TensorFlow's GPUs.)
"""

from __future__ import annotations

from typing import Tuple

from cifar_dist.common.errors import CifarDistError
from cifar_dist.training.process.tf_console import filtered_native_stderr
from cifar_dist.training.process.threads import ThreadPlan, plan_threads


class GpuCountError(CifarDistError, RuntimeError):
    """More ranks on a host than it has GPUs."""


def use_gpu_and_threads(
    local_rank: int, local_size: int, host_ranks: int, intra_op_threads: int = 0, inter_op_threads: int = 0
) -> Tuple[str, ThreadPlan]:
    """This process's GPU (the one of its local rank; "" on CPU) and its thread pools, set in TensorFlow.

    ``local_size``: the job's processes on this host (one GPU each); ``host_ranks``: every process on this
    host that shares its cores (in a concurrent sweep, the other groups' ranks too)."""
    import tensorflow as tf  # lazy: TensorFlow (the engine's start loaded it, with its CPU kernels chosen)

    gpu_name = ""
    with filtered_native_stderr():  # "failed call to cuInit" on CPU machines
        gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if local_rank >= len(gpus):
            raise GpuCountError(
                f"{local_size} ranks on this host but {len(gpus)} GPU(s): "
                f"start at most {len(gpus)} ranks per host (launcher.np / hosts slots)"
            )
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpus[local_rank], "GPU")
        gpu_name = gpus[local_rank].name
    plan = plan_threads(host_ranks, intra_op_threads, inter_op_threads)
    tf.config.threading.set_intra_op_parallelism_threads(plan.intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(plan.inter_op)
    return gpu_name, plan
