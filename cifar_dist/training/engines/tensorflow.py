"""The TensorFlow engine: TensorFlow's kernels in every process, no Horovod, for Keras 2 and Keras 3 (on TensorFlow).

What ``engine=auto`` trains on where Horovod is not installed (the current
stack: docs/install.md): one process, or several on CPUs. It is what the
Horovod engine is, without Horovod:

- one process (``mpi_peers.OneProcess``): nothing to average, every
  collective the identity, mpi4py never imported;
- several (``launcher=mpirun``, ``launcher=slurm``, Azure ML's MPI jobs:
  ``mpi_peers.MpiPeers``): each process joins MPI through mpi4py; the
  optimizer applies the mean of the processes' gradients, one fused
  ``MPI_Allreduce`` a step inside the compiled step (``mpi_gradients.py``);
  rank 0's weights and optimizer state are broadcast before the first step,
  rank 0 restores a checkpoint and writes them, BatchNorm's moving statistics
  and each epoch's metrics are averaged, the exact test's sums gathered,
  each as Horovod's engine does them (docs/engines.md).

The rest is what the Horovod engine does in each rank: TensorFlow's CPU
kernels chosen before it loads, one GPU per local rank with memory growth,
the thread pools sized to this process's share of its host's cores. Keras 2
runs get the warmup and step decay that Horovod's callbacks give them from
the lr schedule, as Keras 3 runs do (``recipe.learning_rate``): the same lr
per step.
"""

from __future__ import annotations

import logging

import numpy as np

from cifar_dist.common.engine_facts import TENSORFLOW
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.keras_flavor import as_tf_variable
from cifar_dist.rundir import checkpoints
from cifar_dist.training.engines.epoch_metrics import AverageEpochMetrics
from cifar_dist.training.engines.mpi_peers import join_peers, mpi_error_line
from cifar_dist.training.engines.tf_data_loop import TfDataLoop
from cifar_dist.training.engines.world import World
from cifar_dist.training.process.hardware import onednn_enabled, use_onednn
from cifar_dist.training.process.horovod_env import tensorflow_for_training
from cifar_dist.training.process.tf_console import filtered_native_stderr
from cifar_dist.training.process.tf_devices import use_gpu_and_threads

log = logging.getLogger(__name__)


class TensorflowEngineError(CifarDistError, RuntimeError):
    """What engine=tensorflow cannot do here, or another of its processes stopped."""


class TensorflowEngine(TfDataLoop):
    """TensorFlow in every process of the job; several processes averaged over MPI (``peers``)."""

    facts = TENSORFLOW

    def __init__(self, world: World, peers):
        super().__init__(world)
        self.peers = peers  # mpi_peers.OneProcess or MpiPeers: what the collectives below go through

    @classmethod
    def start(cls, trainer_cfg) -> TensorflowEngine:
        """CPU kernels, TensorFlow, MPI where the launcher started several processes (``join_peers``); then, as
        the Horovod engine does, one GPU per local rank and the thread pools sized to this process's share."""
        t = trainer_cfg
        use_onednn(t.onednn)  # must precede TensorFlow's import
        with filtered_native_stderr(), tensorflow_for_training():  # CUDA start-up noise on CPU machines; no JAX here
            import tensorflow as tf  # lazy: TensorFlow

        peers = join_peers()
        gpu, plan = use_gpu_and_threads(
            peers.local_rank,
            peers.local_size,
            peers.host_ranks,
            t.intra_op_threads,
            t.inter_op_threads,
            t.accelerator,
            cls.facts.name,
        )
        world = World(peers.rank, peers.size, peers.local_rank, peers.local_size, plan, gpu, onednn_enabled())
        log.info(
            "%s, TensorFlow %s: %s, threads intra=%d inter=%d (%s), CPU kernels %s",
            "one process"
            if world.processes == 1
            else f"rank {world.process}/{world.processes} (local {world.local_process}/{world.local_processes}), "
            "gradients over MPI",
            tf.__version__,
            world.gpu or "CPU",
            plan.intra_op,
            plan.inter_op,
            plan.reason,
            "oneDNN" if world.onednn else "Eigen",
        )
        return cls(world, peers)

    def check_jit_compile(self, jit_compile: bool) -> None:
        """One process: the Horovod engine's rule, as this engine has always had it (XLA on CPU is ~8x slower than
        oneDNN for these models). Several: refused, XLA cannot compile the step's MPI allreduce (a Python call)."""
        if not jit_compile:
            return
        if self.world.processes > 1:
            raise TensorflowEngineError(
                "trainer.jit_compile=true cannot run on several engine=tensorflow processes: XLA cannot compile the "
                "step's MPI allreduce; use trainer.jit_compile=false, or engine=jax (every step compiled by XLA)"
            )
        from cifar_dist.training.engines.horovod import check_jit_compile  # the rule's home (no Horovod import)

        check_jit_compile(jit_compile, bool(self.world.gpu))

    def distribute_models(self) -> None:
        """Nothing to set: every process holds its own copy of the model; the optimizer averages the gradients."""

    def rank_seed(self, seed: int) -> int:
        """Each process its own seed (its dropout differs, as on Horovod); the initial weights are rank 0's
        (``broadcast_model``)."""
        return int(seed) + self.world.process

    def exact_test_slice(self) -> tuple:
        """(rank, size): every process scores its own slice of the test set; the trainer adds up the slices' sums."""
        return self.world.process, self.world.processes

    def peer_failure(self, exc: BaseException):
        """One line for ``exc`` when an MPI call failed (a peer gone: killed, crashed, its host lost), instead of
        TensorFlow's traceback; the launcher names which process died. None for any other error, and for one
        process. (On one host Open MPI's launcher ends the survivors itself: docs/engines.md.)"""
        what = mpi_error_line(exc)
        if self.world.processes < 2 or what is None:
            return None
        return TensorflowEngineError(
            f"process {self.world.process}: another process of this {self.world.processes}-process TensorFlow job "
            f"stopped ({what}); the launcher names which one, and its log is in logs/"
        )

    # --- small Python objects between processes ---
    def broadcast_object(self, obj):
        return self.peers.broadcast_object(obj)

    def allgather_object(self, obj) -> list:
        return self.peers.allgather_object(obj)

    def any_rank(self, flag: bool) -> bool:
        return self.peers.any(flag)

    def average_numbers(self, values) -> np.ndarray:
        return self.peers.mean_arrays([np.asarray(values, np.float64)])[0]

    def ramps_lr_in_schedule(self, flavor: int) -> bool:
        """Warmup and step decay are the lr schedule's, for either Keras (no Horovod callbacks here)."""
        return True

    def lr_callbacks(self, flavor: int, trainer_cfg, lr: float, steps: int, is_chief: bool) -> list:
        """None: the schedule ramps the lr."""
        return []

    # --- the model ---
    def distributed_optimizer(self, optimizer, compression: str = "none"):
        """``optimizer``, its gradients averaged over the processes before every update (``mpi_gradients``); as it
        is in one process."""
        if self.world.processes == 1:
            return optimizer
        from cifar_dist.training.engines.mpi_gradients import averaging_optimizer  # lazy: TensorFlow's side

        return averaging_optimizer(optimizer, self.peers, compression)

    def predict_here(self, model, images):
        return model.predict(images, verbose=0)

    def broadcast_model(self, model, variables) -> None:
        """Copy rank 0's ``variables`` (the model's and its optimizer's, in the same order on every process) to
        every process."""
        if self.world.processes == 1 or not variables:
            return
        variables = [as_tf_variable(v) for v in variables]
        for var, value in zip(variables, self.peers.broadcast_arrays([v.numpy() for v in variables])):
            var.assign(value)

    def average_variables(self, variables, name: str) -> None:
        """Replace each of ``variables`` by its mean over the processes, in place (one allreduce per dtype)."""
        if self.world.processes == 1 or not variables:
            return
        variables = [as_tf_variable(v) for v in variables]
        for var, value in zip(variables, self.peers.mean_arrays([v.numpy() for v in variables])):
            var.assign(value)

    def restore_latest(self, model, directory):
        """Rank 0 restores the newest checkpoint that loads (on several hosts the others may not even see the file);
        ``broadcast_model`` then copies its weights to every process."""
        return (
            checkpoints.restore_latest(model, directory) if self.world.is_chief else checkpoints.Restored(0, None, [])
        )

    def metric_averaging(self, model):
        """The callback that averages each epoch's metrics over the processes before anything logs them (what
        Horovod's MetricAverageCallback does); None for one process, whose metrics are the job's."""
        return AverageEpochMetrics(self) if self.world.processes > 1 else None
