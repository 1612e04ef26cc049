"""The training loop: the seed script, done properly.

``train(cfg, output_dir)`` runs on every Horovod rank (one process, or N
under mpirun / Batch AI) and reads as the seed script's steps: start the run,
build the model, restore or start, make the data streams, start the record,
fit with the callbacks, finish (score, save, write). Each Horovod-specific
step is marked HOROVOD: with why, as in Horovod's
examples/tensorflow2/tensorflow2_keras_mnist.py.

Imports: this module is imported in a rank only, but before ``train`` has
read its config, and TensorFlow reads some of that config once, when it is
first imported (``trainer.onednn``: horovod_env.init_world sets it, then
imports TensorFlow and checks tf.keras is Keras 2 before Horovod's Keras layer
loads). So TensorFlow, Horovod (one alias, ``hvd`` = horovod.tensorflow, its
Keras layer as ``hvd.keras``) and the project modules that import them at
module level are imported inside the steps that run after ``start_run``;
everything else is imported here.
"""
from __future__ import annotations

import hashlib
import logging
import math
import os
import resource
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

import hydra.utils
from omegaconf import DictConfig

from cifar_dist.config import typed
from cifar_dist.data import load_dataset
from cifar_dist.atomic_files import remove_partials, write_json
from cifar_dist.errors import CifarDistError
from cifar_dist.models.builder import check_builder
from cifar_dist.results import METRICS_FILE
from cifar_dist.rundir.fingerprint import check_loaded_data
from cifar_dist.training import checkpoints, recipe
from cifar_dist.training.artifacts import plot_learning_curves, read_metrics_to_resume, trim_csv_log
from cifar_dist.training.hardware import cpu_supports_bfloat16
from cifar_dist.training.horovod_env import init_world
from cifar_dist.validation import validate

log = logging.getLogger(__name__)

MODEL_NAME = "keras_cifar10_trained_model.h5"  # the seed's file name


class ResumeError(CifarDistError, RuntimeError):
    pass


class JitCompileError(CifarDistError, RuntimeError):
    pass


class PrecisionError(CifarDistError, RuntimeError):
    pass


def check_jit_compile(jit_compile: bool, on_gpu: bool, environ=None) -> None:
    """Refuse ``trainer.jit_compile=true`` where XLA cannot compile the train step.

    With ``jit_compile`` Keras compiles the whole train step, optimizer
    included, so Horovod's allreduce must be an XLA op. Horovod has XLA
    kernels only in CUDA builds, enabled by HOROVOD_ENABLE_XLA_OPS=1; on CPU
    the first step fails deep in TensorFlow ("No registered 'HorovodAllreduce'
    OpKernel for XLA_CPU_JIT"). (Without Horovod, XLA on this CPU also runs
    the seed CNN ~8x slower than the default oneDNN kernels; see
    docs/benchmarks.md.)
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


def planned_epochs(trainer_cfg, size: int) -> int:
    """The seed divides the epochs over the ranks (every rank sees all data
    each epoch); the shard policy keeps them (each rank sees 1/size)."""
    if trainer_cfg.epoch_policy.value == "divide":
        return int(math.ceil(trainer_cfg.epochs / size))
    return int(trainer_cfg.epochs)


def validation_epochs(every: int, epochs: int):
    """Keras' ``validation_freq`` for trainer.validate_every: 1 (every epoch) as is, else the
    1-based epochs to validate after: every ``every``-th and always the last (0: the last only)."""
    if every == 1:
        return 1
    return sorted({e for e in range(1, epochs + 1) if every and e % every == 0} | {epochs})


def scaled_lr(lr: float, rule: str, size: int) -> float:
    # HOROVOD: the effective batch is size x larger; scale the lr with it.
    return lr * size if rule == "linear" else lr


def precision_policy(precision: str, on_gpu: bool, cpu_bfloat16: bool) -> str:
    """The Keras dtype policy for trainer.precision on this hardware.

    mixed: float16 maths on a GPU, bfloat16 on a CPU with bfloat16
    instructions, and an error elsewhere (emulated bfloat16 is slower than
    float32). auto: the same where it is native, float32 where it is not, so
    a recipe such as experiment=fast runs on any machine.
    """
    if precision == "float32":
        return "float32"
    if on_gpu:
        return "mixed_float16"
    if cpu_bfloat16:
        return "mixed_bfloat16"
    if precision == "auto":
        return "float32"
    raise PrecisionError(
        "trainer.precision=mixed needs a GPU or a CPU with bfloat16 instructions (avx512_bf16/amx); "
        "use trainer.precision=float32, or auto to use mixed precision only where it is native"
    )


def _set_precision(precision: str, on_gpu: bool) -> str:
    import tensorflow as tf  # after init_world (module docstring)

    policy = precision_policy(precision, on_gpu, cpu_supports_bfloat16())
    # Always set: in an in-process sweep an earlier point's policy would linger.
    tf.keras.mixed_precision.set_global_policy(policy)
    return policy


def _decide_resume(world, hvd, checkpoint_dir: Path, mode: str, model) -> int:
    """Rank 0 restores the newest good checkpoint; every rank learns its epoch.

    HOROVOD: only rank 0 reads the checkpoint (on several hosts the others
    may not even see the file); train() then broadcasts its weights and
    optimizer state to every rank before the first step, and the epoch to
    start from is broadcast here so all ranks agree.
    """
    decision = (0, None)
    if world.is_chief:
        # Temp files of writes a kill -9 interrupted (never under a real name).
        remove_partials(checkpoint_dir.parent, checkpoint_dir, checkpoint_dir.parent / "saved_models")
        existing = checkpoints.list_checkpoints(checkpoint_dir)
        if mode == "false" and existing:
            decision = (
                -1,
                f"{checkpoint_dir} already holds checkpoints; resume with trainer.resume=true "
                "or start a new run dir (hydra.run.dir=...)",
            )
        elif mode in ("auto", "true") and existing:
            restored = checkpoints.restore_latest(model, checkpoint_dir)
            if restored.path is None:
                decision = (-1, f"no checkpoint in {checkpoint_dir} loads ({'; '.join(restored.skipped)}); "
                                "move them aside to start fresh")
            else:
                decision = (restored.epoch, None)
        elif mode == "true":
            decision = (-1, f"trainer.resume=true but {checkpoint_dir} holds no checkpoint; use trainer.resume=auto")
    epoch, error = hvd.broadcast_object(decision, root_rank=0)
    if error:
        raise ResumeError(error)
    return epoch


def _evaluate_exact(model, stream, hvd, outputs=("",)) -> List[Dict[str, float]]:
    """Test loss/accuracy over the whole test set, equal to a single-rank run, for each of the
    model's ``outputs`` (the prefixes of their metric names; "" for a one-output model).

    Every rank evaluates its own slice (all ranks together cover each image
    once); sums, not means, are combined, so uneven slices weigh right.
    """
    logs = {}
    if stream.samples:
        logs = model.evaluate(stream.dataset, steps=stream.steps, verbose=0, return_dict=True)
    # Keras reports a float32 mean; the count of correct images behind it is
    # exact after rounding, so the combined accuracy is an exact fraction.
    mine = [(float(logs.get(f"{o}loss", 0.0)) * stream.samples,
             round(float(logs.get(f"{o}accuracy", 0.0) * stream.samples)))
            for o in outputs]
    # HOROVOD: one collective for the numbers of every rank.
    parts = hvd.allgather_object((mine, stream.samples))
    total = sum(p[1] for p in parts)
    results = []
    for i in range(len(outputs)):
        correct = sum(p[0][i][1] for p in parts)
        results.append({"loss": sum(p[0][i][0] for p in parts) / total, "accuracy": correct / total,
                        "correct": int(correct), "samples": int(total)})
    return results


def weights_digest(model) -> str:
    """A fingerprint of the model's weights, to check that ranks agree."""
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()[:16]


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@dataclass
class Run:
    """What every step of ``train`` needs: the config, this rank's world, where to write."""

    cfg: Any  # the typed, validated config
    world: Any  # horovod_env.World
    output_dir: Path
    epochs: int  # planned for this world size
    lr: float  # scaled for this world size
    wall_start: float = field(default_factory=time.time)

    @property
    def trainer(self):
        return self.cfg.trainer

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.output_dir / METRICS_FILE


def train(cfg: DictConfig, output_dir: Path) -> Dict[str, Any]:
    """Train (or resume) the configured model; return the final metrics."""
    run, policy = start_run(cfg, Path(output_dir))
    from cifar_dist.training.interrupts import interrupts_kept  # a Keras callback: imports TensorFlow

    data = load_data(run)
    check_loaded_data(run, data)  # a resume with other data (class names, counts) is refused: rundir/fingerprint.py
    model, compile_kwargs = build_model(run, data)
    initial_epoch = restore_or_start(run, model)
    train_data, val_data = make_streams(run, data, initial_epoch)
    metrics, previous_wall = start_record(run, initial_epoch, policy, data, train_data)
    with interrupts_kept() as kept_interrupt:  # a Ctrl-C Python could not raise is raised at the next batch
        tracker = open_tracker(run)
        if initial_epoch < run.epochs:
            callbacks = make_callbacks(run, model, train_data, metrics, initial_epoch, previous_wall, tracker)
            model.fit(
                train_data.dataset,
                epochs=run.epochs,
                initial_epoch=initial_epoch,
                steps_per_epoch=train_data.steps_per_epoch,
                validation_data=val_data.dataset,
                validation_steps=val_data.steps,
                validation_freq=validation_epochs(run.trainer.validate_every, run.epochs),
                callbacks=[kept_interrupt, *callbacks],
                verbose=run.trainer.verbose if run.world.is_chief else 0,
            )
        return finish(run, model, data, metrics, initial_epoch, previous_wall, tracker, compile_kwargs)


def start_run(cfg: DictConfig, output_dir: Path):
    """Validate the config, start Horovod and fix what TensorFlow must know before any op."""
    wall_start = time.time()
    cfg = typed(cfg)
    validate(cfg)
    t = cfg.trainer
    world = init_world(t.intra_op_threads, t.inter_op_threads, t.onednn)
    import tensorflow as tf  # only now: init_world chose TensorFlow's CPU kernels before it loads

    if t.deterministic:
        tf.config.experimental.enable_op_determinism()
        # Dropout from tf.random.Generator state that ReseedEachEpoch resets
        # per epoch, so a resumed run equals an uninterrupted one bit for bit.
        tf.keras.backend.experimental.enable_tf_random_generator()
    tf.keras.utils.set_random_seed(t.seed + world.rank)
    check_jit_compile(bool(t.jit_compile), bool(world.gpu))
    policy = _set_precision(t.precision.value, bool(world.gpu))
    check_builder(cfg.model)  # imported now, after init_world; checked against its signature before any data is read
    run = Run(cfg=cfg, world=world, output_dir=output_dir, epochs=planned_epochs(t, world.size),
              lr=scaled_lr(cfg.optimizer.lr, t.lr_scaling.value, world.size), wall_start=wall_start)
    return run, policy


def load_data(run: Run):
    """The configured data set, in memory (every rank reads it; streams take their part)."""
    data = load_dataset(run.cfg.data, run.trainer.seed)
    if run.world.is_chief:
        log.info("data: %s", data.source)
        log.info("%d train samples, %d test samples, %d classes", data.train_size, data.test_size, data.num_classes)
    return data


def model_kwargs(model_cfg, data) -> Dict[str, Any]:
    """The model builder's ``num_classes``: the data's; a model.num_classes that disagrees is refused."""
    from cifar_dist.errors import ConfigError

    asked = model_cfg.get("num_classes")
    if asked is not None and int(asked) != data.num_classes:
        raise ConfigError(f"model.num_classes={asked} but {data.source} has {data.num_classes} classes; "
                          "leave model.num_classes unset (it comes from the data)")
    return {"num_classes": data.num_classes}


def check_model_fits(model, data) -> None:
    """A model whose input is not the data's image shape fails here in one line, not inside fit()."""
    from cifar_dist.errors import ConfigError

    if tuple(model.input_shape[1:]) != tuple(data.image_shape):
        raise ConfigError(f"the model takes {tuple(model.input_shape[1:])} images but {data.source} gives "
                          f"{tuple(data.image_shape)}; set data.image_size (data=folder) or the model's input shape to match")


def build_model(run: Run, data):
    """The configured model and optimizer, compiled, with the optimizer's slots created.

    Returns the model and the compile arguments the final (TTA) test reuses.
    """
    import horovod.tensorflow as hvd  # after init_world (module docstring)
    import horovod.tensorflow.keras  # noqa: F401  (hvd.keras: Horovod's Keras optimizer and callbacks)

    from cifar_dist.data.pipeline import steps_per_epoch  # imports TensorFlow

    t, world = run.trainer, run.world
    model = hydra.utils.instantiate(run.cfg.model, **model_kwargs(run.cfg.model, data))
    check_model_fits(model, data)
    # --- recipe (experiment=speedrun): data-fitted layers, per-step lr schedule, label smoothing ---
    recipe.fit_to_data(model, data)
    steps = steps_per_epoch(data.train_size, t.batch_size, world.size, t.epoch_policy.value == "shard")
    lr_or_schedule = recipe.learning_rate(run.lr, t, steps, run.epochs)
    compile_kwargs = dict(loss=recipe.loss(t.label_smoothing), metrics=["accuracy"])
    # (_partial_: a LearningRateSchedule is no float for the typed config node)
    optimizer = hydra.utils.instantiate(run.cfg.optimizer, _partial_=True)(lr=lr_or_schedule)
    # HOROVOD: average gradients across ranks at every step (fp16 compression optional).
    compression = hvd.Compression.fp16 if t.compression.value == "fp16" else hvd.Compression.none
    optimizer = hvd.keras.DistributedOptimizer(optimizer, compression=compression)
    model.compile(
        optimizer=optimizer,
        **compile_kwargs,
        jit_compile=bool(t.jit_compile),
        steps_per_execution=t.steps_per_execution,
    )
    create_optimizer_slots(model.optimizer, model.trainable_variables)
    return model, compile_kwargs


def create_optimizer_slots(optimizer, variables) -> None:
    """Create the optimizer's step counter, hyperparameters and slots now, before any step.

    HOROVOD: the broadcast in restore_or_start matches variables across
    ranks by name, and legacy optimizers name their slots after the scope
    they are created in. Creating them here, the same way on every rank,
    makes rank 0 restoring a checkpoint and ranks starting fresh name them
    alike. Keras' new optimizers do this with the public ``build``; Keras 2's
    legacy optimizers, which this project uses (training/optimizers.py), and
    their LossScaleOptimizer have no public equivalent: tf-keras' own HDF5
    loader calls ``_create_all_weights`` for the same purpose, and so do we.
    """
    if hasattr(optimizer, "build"):
        optimizer.build(variables)
    else:
        optimizer._create_all_weights(variables)


def restore_or_start(run: Run, model) -> int:
    """The epoch to start after: rank 0 restores a checkpoint, every rank gets its weights."""
    import horovod.tensorflow as hvd  # after init_world (module docstring)

    initial_epoch = _decide_resume(run.world, hvd, run.checkpoint_dir, str(run.trainer.resume).lower(), model)
    if run.world.is_chief and initial_epoch:
        log.info("resuming after epoch %d from %s", initial_epoch,
                 checkpoints.checkpoint_path(run.checkpoint_dir, initial_epoch))
    # HOROVOD: copy rank 0's initial (or restored) weights and optimizer state
    # to every rank before the first step. Horovod's Keras examples use
    # BroadcastGlobalVariablesCallback, which waits for the first batch to end
    # because the optimizer's slots do not exist before it; here they do (see
    # build_model), so no rank ever steps from weights of its own, not even for
    # the first steps_per_execution steps (the callback's "first batch").
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(model.optimizer.variables(), root_rank=0)
    return initial_epoch


def make_streams(run: Run, data, initial_epoch: int):
    """This rank's training stream (from ``initial_epoch`` on) and its validation slice."""
    from cifar_dist.data.streams import eval_input, train_input  # imports TensorFlow

    cfg, t, world = run.cfg, run.trainer, run.world
    train_data = train_input(
        data, batch_size=t.batch_size, rank=world.rank, size=world.size, shard=t.epoch_policy.value == "shard",
        seed=t.seed, initial_epoch=initial_epoch, epochs=run.epochs, augment=cfg.data.augment,
        shuffle_buffer=cfg.data.shuffle_buffer, prefetch=cfg.data.prefetch,
    )
    val_data = eval_input(data, batch_size=t.batch_size, rank=world.rank, size=world.size, equal_shards=True)
    return train_data, val_data


def start_record(run: Run, initial_epoch: int, policy: str, data, train_data):
    """metrics.json's content so far (rank 0; records after the restored epoch dropped) and its wall time."""
    import horovod
    import tensorflow as tf  # after init_world (module docstring)

    cfg, t, world = run.cfg, run.trainer, run.world
    metrics: Dict[str, Any] = {}
    if world.is_chief and initial_epoch:
        metrics = read_metrics_to_resume(run.metrics_path)  # {} when missing or damaged
        # Epochs logged after the restored checkpoint are redone: drop their records.
        metrics["epochs"] = [e for e in metrics.get("epochs", []) if e["epoch"] <= initial_epoch]
        trim_csv_log(run.output_dir / "training_log.csv", initial_epoch)
    previous_wall = float(metrics.get("wall_time_s", 0.0)) if initial_epoch else 0.0
    metrics.update(
        {
            "ranks": world.size,
            "run": {
                "epochs": run.epochs,
                "epoch_policy": t.epoch_policy.value,
                "batch_size_per_rank": t.batch_size,
                "global_batch_size": t.batch_size * world.size,
                "lr_config": cfg.optimizer.lr,
                "lr_scaled": run.lr,
                "lr_scaling": t.lr_scaling.value,
                "optimizer": cfg.optimizer._target_.rsplit(".", 1)[-1],
                "model": cfg.model._target_,
                "precision": policy,
                "data": data.source,
                "train_images": int(data.train_size),
                "test_images": int(data.test_size),
                "class_names": list(data.class_names),
                "steps_per_epoch": train_data.steps_per_epoch,
                "steps_per_execution": t.steps_per_execution,
                "threads_intra_op": world.threads.intra_op,
                "threads_inter_op": world.threads.inter_op,
                "onednn": world.onednn,
                "tensorflow": tf.__version__,
                "horovod": horovod.__version__,
                **recipe.run_info(t),
            },
            "resumed_from_epoch": initial_epoch,
            "complete": False,
        }
    )
    metrics.setdefault("epochs", [])
    return metrics, previous_wall


def open_tracker(run: Run):
    """TRACKING (cifar_dist/tracking): rank 0 opens, or when resuming reopens, its MLflow run; None otherwise."""
    if not run.world.is_chief:
        return None
    from cifar_dist.tracking import open_for_training  # tracking is an optional extra: only when configured

    return open_for_training(run.cfg, run.output_dir, run.world.size)


def make_callbacks(run: Run, model, train_data, metrics: Dict[str, Any], initial_epoch: int, previous_wall: float,
                   tracker=None):
    """Keras callbacks in the order they must run: Horovod's averaging first, writers (rank 0) last."""
    import horovod.tensorflow as hvd  # after init_world (module docstring)
    import horovod.tensorflow.keras  # noqa: F401  (hvd.keras: Horovod's Keras callbacks)
    import tensorflow as tf

    from cifar_dist.training.callbacks import (  # Keras callbacks: import TensorFlow
        AtomicCheckpoint, EpochCSVLogger, EpochTimer, MetricsRecorder, ReseedEachEpoch, StopAfterEpochs,
        StopOnNonFiniteLoss)
    from cifar_dist.training.preemption import stop_on_signal_from_env  # a Keras callback too

    t, world, lr, steps = run.trainer, run.world, run.lr, train_data.steps_per_epoch
    callbacks = [
        EpochTimer(train_data.images_per_rank_epoch * world.size),
        # HOROVOD: average the epoch's metrics over ranks, before anything logs them.
        hvd.keras.callbacks.MetricAverageCallback(),
        StopOnNonFiniteLoss(lr),  # NaN/inf: one-line error on every rank, nothing of that epoch written
        # lookahead; BatchNorm statistics averaged across ranks, before any writer
        *recipe.callbacks(model, t, steps * run.epochs),
    ]
    if t.warmup_epochs > 0:
        # HOROVOD: ramp the lr from lr/size to lr over the first epochs
        # (Goyal et al.), so the large effective batch does not diverge early.
        callbacks.append(hvd.keras.callbacks.LearningRateWarmupCallback(
            initial_lr=lr, warmup_epochs=t.warmup_epochs, steps_per_epoch=steps, verbose=1 if world.is_chief else 0))
    decays = sorted(t.lr_decay_epochs)
    for i, start in enumerate(decays):
        callbacks.append(hvd.keras.callbacks.LearningRateScheduleCallback(
            initial_lr=lr, multiplier=t.lr_decay_factor ** (i + 1), start_epoch=start,
            end_epoch=decays[i + 1] if i + 1 < len(decays) else None, steps_per_epoch=steps))
    if t.deterministic:
        callbacks.append(ReseedEachEpoch(t.seed + world.rank))
    if t.max_epochs_per_run:
        callbacks.append(StopAfterEpochs(t.max_epochs_per_run))
    stop_on_signal = stop_on_signal_from_env()  # a cluster launcher's "time is nearly up" signal
    if stop_on_signal is not None:
        callbacks.append(stop_on_signal)
    if world.is_chief:
        # HOROVOD: only rank 0 writes, so ranks never corrupt each other's files.
        callbacks.append(EpochCSVLogger(str(run.output_dir / "training_log.csv"), append=bool(initial_epoch)))
        if t.tensorboard:
            callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=str(run.output_dir / "tensorboard"), profile_batch=0))
        run_start = time.time()
        # Records first, checkpoint last: a kill between the two makes the
        # re-run redo (and re-record) that epoch instead of losing its record.
        callbacks.append(MetricsRecorder(
            run.metrics_path, metrics,
            on_update=lambda m: m.update(wall_time_s=previous_wall + time.time() - run_start)))
        callbacks.append(AtomicCheckpoint(run.checkpoint_dir, t.keep_checkpoints))
    if tracker is not None:  # TRACKING: log each epoch once it is on disk
        callbacks.append(tracker.callback())
    return callbacks


def finish(run: Run, model, data, metrics: Dict[str, Any], initial_epoch: int, previous_wall: float, tracker=None,
           compile_kwargs=None):
    """Check the ranks agree, score the test set once training is done, save and write the record."""
    import horovod.tensorflow as hvd  # after init_world (module docstring)

    from cifar_dist.data.streams import eval_input  # imports TensorFlow

    world, t = run.world, run.trainer
    recipe.sync_model(model)  # BatchNorm moving statistics: one set for the job
    # HOROVOD: with averaged gradients every rank ends with the same weights;
    # record each rank's fingerprint so a broken averaging is visible.
    digests = hvd.allgather_object(weights_digest(model))
    peak_rss = hvd.allgather_object(peak_rss_mb())
    if world.is_chief:
        metrics["peak_rss_mb_per_rank"] = peak_rss
        metrics["rank_weight_digests"] = digests
        metrics["ranks_in_sync"] = len(set(digests)) == 1
        if not metrics["ranks_in_sync"]:
            log.warning("ranks ended with different weights: %s", digests)

    done = max([e["epoch"] for e in metrics.get("epochs", [])] + [initial_epoch]) if world.is_chief else 0
    # HOROVOD: rank 0 alone kept the record; every rank must agree whether to score.
    finished = hvd.broadcast_object(done, root_rank=0) >= run.epochs
    if finished:
        test_stream = eval_input(data, batch_size=t.batch_size, rank=world.rank, size=world.size, equal_shards=False)
        metrics.update(recipe.final_test(
            model, lambda m, outputs=("",): _evaluate_exact(m, test_stream, hvd, outputs), t.tta.value, compile_kwargs))
    if world.is_chief:
        _write_record(run, model, metrics, finished, done, previous_wall)
        if tracker is not None:  # TRACKING: test metrics, artifacts, FINISHED (KILLED when stopped early)
            tracker.finish(metrics)
    return hvd.broadcast_object(metrics if world.is_chief else None, root_rank=0)


def _write_record(run: Run, model, metrics: Dict[str, Any], finished: bool, done: int, previous_wall: float) -> None:
    """Rank 0: the final model, the learning curves and metrics.json."""
    t = run.trainer
    rates = [e["images_per_sec"] for e in metrics["epochs"] if "images_per_sec" in e]
    steady = rates[1:] or rates  # the first epoch includes tracing
    metrics["images_per_sec"] = statistics.median(steady) if steady else None
    metrics["wall_time_s"] = previous_wall + time.time() - run.wall_start
    if finished:
        metrics["complete"] = True
        if t.save_model:
            model_path = run.output_dir / "saved_models" / MODEL_NAME
            checkpoints.atomic_save_model(model, model_path, include_optimizer=False)
            metrics["model_path"] = str(model_path.relative_to(run.output_dir))
            log.info("Saved trained model at %s", model_path)
        log.info("Test loss: %.4f", metrics["test"]["loss"])
        log.info("Test accuracy: %.4f", metrics["test"]["accuracy"])
    else:
        log.info("stopped after epoch %d of %d (trainer.max_epochs_per_run or a stop signal); re-run to resume",
                 done, run.epochs)
    if t.plot and metrics["epochs"]:
        plot_learning_curves(metrics["epochs"], run.output_dir / "learning_curves.png",
                             title=f"{metrics['run']['model'].rsplit('.', 2)[-2]} on {run.cfg.data.name}, "
                                   f"{run.world.size} rank(s)")
    write_json(run.metrics_path, metrics)
