"""The TensorFlow engine: one process, no Horovod, for Keras 2 and Keras 3 (on TensorFlow's backend) models.

What ``engine=auto`` trains a one-process job on where Horovod is not
installed (the current stack: docs/install.md). A job of one process needs
nothing of what makes N processes one job, so every collective of the engine
seam is the identity here: no gradient averaging, no broadcast, no metric
averaging. The rest is what the Horovod engine does in each rank: TensorFlow's
CPU kernels chosen before it loads, one GPU with memory growth, the thread
pools sized to the machine. The Keras 2 warmup and step decay that Horovod's
callbacks give a Keras 2 run are in the lr schedule here, as for Keras 3
(``recipe.learning_rate``): the same lr per step.
"""

from __future__ import annotations

import logging

import numpy as np

from cifar_dist.common.engine_facts import TENSORFLOW
from cifar_dist.common.errors import CifarDistError
from cifar_dist.rundir import checkpoints
from cifar_dist.training.engines.tf_data_loop import TfDataLoop
from cifar_dist.training.engines.world import World, processes_from_env
from cifar_dist.training.process.hardware import onednn_enabled, use_onednn
from cifar_dist.training.process.horovod_env import tensorflow_without_jax
from cifar_dist.training.process.tf_console import filtered_native_stderr
from cifar_dist.training.process.tf_devices import use_gpu_and_threads

log = logging.getLogger(__name__)


class OneProcessOnly(CifarDistError, RuntimeError):
    """engine=tensorflow was started in one of several processes."""


class TensorflowEngine(TfDataLoop):
    """TensorFlow alone, in the one process of the job."""

    facts = TENSORFLOW

    @classmethod
    def start(cls, trainer_cfg) -> TensorflowEngine:
        peers = processes_from_env()
        if peers > 1:
            raise OneProcessOnly(
                f"engine=tensorflow trains in one process, but this is one of {peers}: use engine=jax (Keras 3) "
                "or engine=horovod for several processes, or leave engine unset (engine=auto chooses)"
            )
        t = trainer_cfg
        use_onednn(t.onednn)  # must precede TensorFlow's import
        with filtered_native_stderr(), tensorflow_without_jax():  # CUDA start-up noise on CPU machines; no JAX here
            import tensorflow as tf  # lazy: TensorFlow

        # The first GPU, growing its memory as needed, and the whole host's cores: as a Horovod rank alone on it.
        gpu, plan = use_gpu_and_threads(0, 1, 1, t.intra_op_threads, t.inter_op_threads)
        world = World(0, 1, 0, 1, plan, gpu, onednn_enabled())
        log.info(
            "one process, TensorFlow %s: %s, threads intra=%d inter=%d (%s), CPU kernels %s",
            tf.__version__,
            world.gpu or "CPU",
            plan.intra_op,
            plan.inter_op,
            plan.reason,
            "oneDNN" if world.onednn else "Eigen",
        )
        return cls(world)

    def check_jit_compile(self, jit_compile: bool) -> None:
        """The Horovod engine's rule, as this engine has always had it (XLA on CPU is ~8x slower than oneDNN
        for these models; its GPU line asks for Horovod's XLA ops, which a run without Horovod does not use)."""
        if jit_compile:
            from cifar_dist.training.engines.horovod import check_jit_compile  # the rule's home (no Horovod import)

            check_jit_compile(jit_compile, bool(self.world.gpu))

    def distribute_models(self) -> None:
        """Nothing to set: one process holds the one model."""

    def rank_seed(self, seed: int) -> int:
        return int(seed)

    def exact_test_slice(self) -> tuple:
        return 0, 1

    def peer_failure(self, exc: BaseException):
        """The one-line error for ``exc`` when it says another process of the job died (the JAX engine's);
        None here: one process: no peer to lose."""
        return None

    # --- the collectives of one process: the identity ---
    def broadcast_object(self, obj):
        return obj

    def allgather_object(self, obj) -> list:
        return [obj]

    def any_rank(self, flag: bool) -> bool:
        return bool(flag)

    def distributed_optimizer(self, optimizer, compression: str = "none"):
        return optimizer

    def ramps_lr_in_schedule(self, flavor: int) -> bool:
        """Warmup and step decay are the lr schedule's, for either Keras (no Horovod callbacks here)."""
        return True

    def lr_callbacks(self, flavor: int, trainer_cfg, lr: float, steps: int, is_chief: bool) -> list:
        """None: the schedule ramps the lr."""
        return []

    def predict_here(self, model, images):
        return model.predict(images, verbose=0)

    def broadcast_model(self, model, variables) -> None:
        """Nothing to copy: there is no other process."""

    def average_variables(self, variables, name: str) -> None:
        """The mean over one process is the value itself."""

    def average_numbers(self, values) -> np.ndarray:
        return np.asarray(values, np.float64)

    def restore_latest(self, model, directory):
        return checkpoints.restore_latest(model, directory)

    def metric_averaging(self, model):
        """None: one process's metrics are the job's."""
        return None
