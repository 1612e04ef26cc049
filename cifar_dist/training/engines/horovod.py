"""The Horovod engine: gradients averaged by Horovod's allreduce, for Keras 2 and Keras 3 models.

Keras 2 (tf.keras) models use Horovod's documented Keras layer, as in
Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py:
``hvd.keras.DistributedOptimizer`` and ``MetricAverageCallback``.

Keras 3 models cannot: Horovod 0.28's Keras layer hooks Keras 2's optimizer
(``get_gradients``/``_aggregate_gradients``), which Keras 3's ``train_step``
never calls, so its ranks would silently stop averaging. Horovod's TensorFlow
ops work on Keras 3's TensorFlow backend all the same, so the Keras 3 optimizer
is wrapped the way Horovod wraps Keras 2's: a subclass of the optimizer's own
class whose ``apply`` averages the gradients (one grouped allreduce) before
the update (``distributed_keras3_optimizer``). ``fit``'s own ``train_step``,
a user's custom ``train_step`` and ``apply_gradients`` all end in ``apply``.
The epoch's metrics are averaged by ``AverageEpochMetrics``
(``epoch_metrics.py``), the same allreduce Horovod's MetricAverageCallback makes.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from cifar_dist.common.engine_facts import HOROVOD
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.keras_flavor import KERAS2, as_tf_variable, flavor_of
from cifar_dist.rundir import checkpoints
from cifar_dist.training.engines.epoch_metrics import AverageEpochMetrics
from cifar_dist.training.engines.tf_data_loop import TfDataLoop
from cifar_dist.training.engines.world import World
from cifar_dist.training.process.hardware import onednn_enabled
from cifar_dist.training.process.horovod_env import join_horovod
from cifar_dist.training.process.tf_devices import use_gpu_and_threads

log = logging.getLogger(__name__)


class JitCompileError(CifarDistError, RuntimeError):
    pass


def check_jit_compile(jit_compile: bool, on_gpu: bool, environ=None) -> None:
    """Refuse ``trainer.jit_compile=true`` where XLA cannot compile the train step.

    With ``jit_compile`` Keras compiles the whole train step, optimizer
    included, so Horovod's allreduce must be an XLA op. Horovod has XLA
    kernels only in CUDA builds, enabled by HOROVOD_ENABLE_XLA_OPS=1; on CPU
    the first step fails deep in TensorFlow ("No registered 'HorovodAllreduce'
    OpKernel for XLA_CPU_JIT"). (Without Horovod, XLA on this CPU also runs
    the seed CNN ~8x slower than the default oneDNN kernels; see
    docs/benchmarks-history.md.)
    """
    environ = os.environ if environ is None else environ
    if not jit_compile:
        return
    if not on_gpu:
        raise JitCompileError(
            "trainer.jit_compile=true cannot run on CPU: Horovod's allreduce has no XLA CPU kernel "
            "(and XLA is ~8x slower than oneDNN for this model on CPU); use trainer.jit_compile=false"
        )
    if environ.get("HOROVOD_ENABLE_XLA_OPS") != "1":
        raise JitCompileError(
            "trainer.jit_compile=true on GPU needs Horovod's XLA ops: export HOROVOD_ENABLE_XLA_OPS=1 "
            "(Horovod built with CUDA), or use trainer.jit_compile=false"
        )


class HorovodEngine(TfDataLoop):
    """Horovod, started by ``start`` (hvd.init, GPU pinning, thread pools) in every rank."""

    facts = HOROVOD

    def __init__(self, world: World):
        import horovod.tensorflow as hvd  # lazy: Horovod

        super().__init__(world)
        self.hvd = hvd

    @classmethod
    def start(cls, trainer_cfg) -> HorovodEngine:
        """hvd.init() (``join_horovod``); then, as in Horovod's Keras examples, one GPU per local rank and the thread
        pools sized to this rank's share of the host's cores."""
        t = trainer_cfg
        hvd, host_ranks = join_horovod(t.onednn)
        # HOROVOD: one GPU per process, chosen by local rank; the thread pools sized to this rank's share.
        # In a concurrent sweep the other groups' ranks on this host share its cores too.
        gpu, plan = use_gpu_and_threads(
            hvd.local_rank(),
            hvd.local_size(),
            host_ranks,
            t.intra_op_threads,
            t.inter_op_threads,
            t.accelerator,
            cls.facts.name,
        )
        world = World(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), plan, gpu, onednn_enabled())
        log.info(
            "rank %d/%d (local %d/%d): %s, TF threads intra=%d inter=%d (%s), CPU kernels %s",
            world.process,
            world.processes,
            world.local_process,
            world.local_processes,
            world.gpu or "CPU",
            plan.intra_op,
            plan.inter_op,
            plan.reason,
            "oneDNN" if world.onednn else "Eigen",
        )
        return cls(world)

    def check_jit_compile(self, jit_compile: bool) -> None:
        """trainer.jit_compile=true only where Horovod's allreduce is an XLA op (``check_jit_compile``)."""
        check_jit_compile(jit_compile, bool(self.world.gpu))

    def distribute_models(self) -> None:
        """Nothing to set: every rank holds its own copy of the model; the optimizer averages the gradients."""

    def rank_seed(self, seed: int) -> int:
        """Each rank its own seed: its dropout differs, as one rank's would over more data (the initial weights are
        rank 0's anyway: ``broadcast_model``)."""
        return int(seed) + self.world.process

    def exact_test_slice(self) -> tuple:
        """(rank, size): every rank scores its own slice of the test set; the trainer adds up the slices' sums."""
        return self.world.process, self.world.processes

    def peer_failure(self, exc: BaseException):
        """The one-line error for ``exc`` when it says another process of the job died (the JAX engine's);
        None here: Horovod reports a lost rank itself, and its launcher names it."""
        return None

    # --- small Python objects between ranks ---
    def broadcast_object(self, obj):
        return self.hvd.broadcast_object(obj, root_rank=0)

    def allgather_object(self, obj) -> list:
        return self.hvd.allgather_object(obj)

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any one (a collective)."""
        import tensorflow as tf  # lazy: TensorFlow

        return float(self.hvd.allreduce(tf.constant(1.0 if flag else 0.0), op=self.hvd.Max, name="any_rank")) > 0

    def ramps_lr_in_schedule(self, flavor: int) -> bool:
        """Keras 2: no, Horovod's lr callbacks set the optimizer's lr variable (``lr_callbacks``); Keras 3
        optimizers have no such variable, so their schedule does the same per step (``schedules.HorovodLr``)."""
        return flavor != KERAS2

    def lr_callbacks(self, flavor: int, trainer_cfg, lr: float, steps: int, is_chief: bool) -> list:
        """Horovod's Keras 2 lr callbacks for trainer.warmup_epochs and trainer.lr_decay_epochs (Keras 3: none)."""
        if flavor != KERAS2:
            return []
        import horovod.tensorflow.keras as hvd_keras  # lazy: Horovod (bound to tf.keras by the start)

        t = trainer_cfg
        found = []
        if t.warmup_epochs > 0:
            # HOROVOD: ramp the lr from lr/size to lr over the first epochs
            # (Goyal et al.), so the large effective batch does not diverge early.
            found.append(
                hvd_keras.callbacks.LearningRateWarmupCallback(
                    initial_lr=lr, warmup_epochs=t.warmup_epochs, steps_per_epoch=steps, verbose=1 if is_chief else 0
                )
            )
        decays = sorted(t.lr_decay_epochs)
        for i, start in enumerate(decays):
            # HOROVOD: a step decay, lr x factor^(i+1) from the i-th decay epoch on. The multiplier is given as a
            # function of the epoch: Horovod reads a constant m as m ** (epoch - start), an exponential decay that
            # would give the decay's own first epoch the full lr again.
            found.append(
                hvd_keras.callbacks.LearningRateScheduleCallback(
                    initial_lr=lr,
                    multiplier=lambda epoch, m=t.lr_decay_factor ** (i + 1): m,
                    start_epoch=start,
                    end_epoch=decays[i + 1] if i + 1 < len(decays) else None,
                    steps_per_epoch=steps,
                )
            )
        return found

    # --- the model ---
    def distributed_optimizer(self, optimizer, compression: str = "none"):
        """``optimizer`` made to average its gradients over the ranks before every update."""
        hvd = self.hvd
        # HOROVOD: average gradients across ranks at every step (fp16 compression optional).
        codec = hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none
        if flavor_of(optimizer) == KERAS2:
            import horovod.tensorflow.keras  # noqa: F401  (hvd.keras: Horovod's Keras 2 layer)

            return hvd.keras.DistributedOptimizer(optimizer, compression=codec)
        return distributed_keras3_optimizer(optimizer, hvd, codec)

    def predict_here(self, model, images):
        """``model``'s outputs for ``images``, in this rank (every rank holds its own model)."""
        return model.predict(images, verbose=0)

    def broadcast_model(self, model, variables) -> None:
        """Copy rank 0's ``variables`` (the model's and its optimizer's) to every rank."""
        # HOROVOD: broadcast_variables matches variables across ranks by their order here,
        # which the same model and optimizer built the same way make equal on every rank.
        self.hvd.broadcast_variables([as_tf_variable(v) for v in variables], root_rank=0)

    def average_variables(self, variables, name: str) -> None:
        """Replace each of ``variables`` by its mean over the ranks, in place (a collective)."""
        if not variables or self.world.processes == 1:
            return
        # HOROVOD: one grouped allreduce for all of them; every rank receives the same bytes.
        averaged = self.hvd.grouped_allreduce(
            [as_tf_variable(v).value() for v in variables], op=self.hvd.Average, name=name
        )
        for var, value in zip(variables, averaged):
            var.assign(value)

    def average_numbers(self, values) -> np.ndarray:
        """The mean over the ranks of a float vector (every rank passes the same length)."""
        import tensorflow as tf  # lazy: TensorFlow

        return self.hvd.allreduce(
            tf.constant(np.asarray(values, np.float64)), op=self.hvd.Average, name="average_numbers"
        ).numpy()

    def restore_latest(self, model, directory):
        """Rank 0 restores the newest checkpoint that loads (on several hosts the others may not even see the file);
        ``broadcast_model`` then copies its weights to every rank."""
        return (
            checkpoints.restore_latest(model, directory) if self.world.is_chief else checkpoints.Restored(0, None, [])
        )

    def metric_averaging(self, model):
        """The callback that averages each epoch's metrics over the ranks, before anything logs them."""
        if flavor_of(model) == KERAS2:
            import horovod.tensorflow.keras  # noqa: F401

            # HOROVOD: Horovod's own callback for Keras 2.
            return self.hvd.keras.callbacks.MetricAverageCallback()
        return AverageEpochMetrics(self)


def distributed_keras3_optimizer(optimizer, hvd, compression):
    """``optimizer`` (a Keras 3 optimizer, built or not) whose ``apply`` averages the gradients over the ranks first.

    The instance's class becomes a subclass of its own class, named and placed
    like it, so that the optimizer saves (and loads) as the optimizer it was;
    Horovod's DistributedOptimizer makes the same kind of subclass for Keras 2.
    """
    base = type(optimizer)

    def apply(self, grads, trainable_variables=None):
        # HOROVOD: the one collective of a training step: every rank applies the mean gradient.
        grads = hvd.grouped_allreduce(list(grads), op=hvd.Average, compression=compression)
        return base.apply(self, grads, trainable_variables)

    optimizer.__class__ = type(
        base.__name__, (base,), {"apply": apply, "__module__": base.__module__, "__qualname__": base.__qualname__}
    )
    return optimizer
