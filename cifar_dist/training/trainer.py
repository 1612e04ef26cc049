"""The training loop: the seed script, done properly, as one function.

``train(cfg, output_dir)`` runs on every Horovod rank (one process, or N
under mpirun / Batch AI). Each Horovod-specific step is marked HOROVOD: with
why, as in Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py.
"""
from __future__ import annotations

import logging
import math
import statistics
import time
from pathlib import Path
from typing import Any, Dict

from omegaconf import DictConfig

from cifar_dist.errors import CifarDistError
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
    import os

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
    import tensorflow as tf

    from cifar_dist.training.hardware import cpu_supports_bfloat16

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
    from cifar_dist.training import checkpoints

    decision = (0, None)
    if world.is_chief:
        from cifar_dist.training.artifacts import remove_partials

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


def _evaluate_exact(model, stream, hvd) -> Dict[str, float]:
    """Test loss/accuracy over the whole test set, equal to a single-rank run.

    Every rank evaluates its own slice (all ranks together cover each image
    once); sums, not means, are combined, so uneven slices weigh right.
    """
    loss = acc = 0.0
    if stream.samples:
        loss, acc = model.evaluate(stream.dataset, steps=stream.steps, verbose=0)
    # Keras reports a float32 mean; the count of correct images behind it is
    # exact after rounding, so the combined accuracy is an exact fraction.
    correct = round(float(acc) * stream.samples)
    # HOROVOD: one collective for the three numbers of every rank.
    parts = hvd.allgather_object((float(loss) * stream.samples, correct, stream.samples))
    total = sum(p[2] for p in parts)
    return {
        "loss": sum(p[0] for p in parts) / total,
        "accuracy": sum(p[1] for p in parts) / total,
        "correct": int(sum(p[1] for p in parts)),
        "samples": int(total),
    }


def weights_digest(model) -> str:
    """A fingerprint of the model's weights, to check that ranks agree."""
    import hashlib

    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()[:16]


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def train(cfg: DictConfig, output_dir: Path) -> Dict[str, Any]:
    """Train (or resume) the configured model; return the final metrics."""
    wall_start = time.time()
    from cifar_dist.config import typed

    cfg = typed(cfg)
    validate(cfg)
    output_dir = Path(output_dir)
    t = cfg.trainer

    from cifar_dist.training.horovod_env import init_world

    world = init_world(t.intra_op_threads, t.inter_op_threads, t.onednn)

    import horovod
    import horovod.tensorflow as hvd_tf  # object collectives (broadcast_object, allgather_object)
    import horovod.tensorflow.keras as hvd
    import hydra.utils
    import tensorflow as tf

    from cifar_dist.data import load_dataset
    from cifar_dist.data.pipeline import eval_stream, steps_per_epoch, train_stream
    from cifar_dist.training import checkpoints, recipe
    from cifar_dist.training.artifacts import plot_learning_curves, read_json, trim_csv_log, write_json
    from cifar_dist.training.callbacks import (
        AtomicCheckpoint, EpochTimer, MetricsRecorder, ReseedEachEpoch, StopAfterEpochs)

    if t.deterministic:
        tf.config.experimental.enable_op_determinism()
        # Dropout from tf.random.Generator state that ReseedEachEpoch resets
        # per epoch, so a resumed run equals an uninterrupted one bit for bit.
        tf.keras.backend.experimental.enable_tf_random_generator()
    tf.keras.utils.set_random_seed(t.seed + world.rank)
    check_jit_compile(bool(t.jit_compile), bool(world.gpu))
    policy = _set_precision(t.precision.value, bool(world.gpu))

    data = load_dataset(cfg.data)
    if world.is_chief:
        log.info("data: %s", data.source)
        log.info("x_train shape: %s, %d train samples, %d test samples", data.x_train.shape, len(data.x_train), len(data.x_test))

    epochs = planned_epochs(t, world.size)
    lr = scaled_lr(cfg.optimizer.lr, t.lr_scaling.value, world.size)

    model = hydra.utils.instantiate(cfg.model)
    # --- recipe (experiment=speedrun): data-fitted layers, per-step lr schedule, label smoothing ---
    recipe.fit_to_data(model, data.x_train)
    shard = t.epoch_policy.value == "shard"
    lr_or_schedule = recipe.learning_rate(
        lr, t, steps_per_epoch(len(data.x_train), t.batch_size, world.size, shard), epochs)
    compile_kwargs = dict(loss=recipe.loss(t.label_smoothing), metrics=["accuracy"])
    # --- end recipe ---
    # (_partial_: a LearningRateSchedule is no float for the typed config node)
    optimizer = hydra.utils.instantiate(cfg.optimizer, _partial_=True)(lr=lr_or_schedule)
    # HOROVOD: average gradients across ranks at every step (fp16 compression optional).
    compression = hvd.Compression.fp16 if t.compression.value == "fp16" else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, compression=compression)
    model.compile(
        optimizer=optimizer,
        **compile_kwargs,
        jit_compile=bool(t.jit_compile),
        steps_per_execution=t.steps_per_execution,
    )
    # HOROVOD: the broadcast below matches variables across ranks by name,
    # and legacy optimizers name their slots after the scope they are created
    # in. Create them here, the same way on every rank, so that rank 0
    # restoring a checkpoint and ranks starting fresh name them alike.
    model.optimizer._create_all_weights(model.trainable_variables)

    checkpoint_dir = output_dir / "checkpoints"
    metrics_path = output_dir / "metrics.json"
    initial_epoch = _decide_resume(world, hvd_tf, checkpoint_dir, str(t.resume).lower(), model)
    if world.is_chief and initial_epoch:
        log.info("resuming after epoch %d from %s", initial_epoch, checkpoints.checkpoint_path(checkpoint_dir, initial_epoch))
    # HOROVOD: copy rank 0's initial (or restored) weights and optimizer state
    # to every rank before the first step. Horovod's Keras examples use
    # BroadcastGlobalVariablesCallback, which waits for the first batch to end
    # because the optimizer's slots do not exist before it; here they do (see
    # above), so no rank ever steps from weights of its own, not even for the
    # first steps_per_execution steps (the callback's "first batch").
    hvd_tf.broadcast_variables(model.variables, root_rank=0)
    hvd_tf.broadcast_variables(model.optimizer.variables(), root_rank=0)

    train_data = train_stream(
        data.x_train, data.y_train,
        batch_size=t.batch_size, rank=world.rank, size=world.size, shard=shard, seed=t.seed,
        initial_epoch=initial_epoch, epochs=epochs, augment=cfg.data.augment,
        num_classes=cfg.model.num_classes, prefetch=cfg.data.prefetch,
    )
    val_data = eval_stream(
        data.x_test, data.y_test, batch_size=t.batch_size, rank=world.rank, size=world.size,
        equal_shards=True, num_classes=cfg.model.num_classes,
    )

    metrics: Dict[str, Any] = {}
    if world.is_chief and initial_epoch and metrics_path.exists():
        metrics = read_json(metrics_path)
        # Epochs logged after the restored checkpoint are redone: drop their records.
        metrics["epochs"] = [e for e in metrics.get("epochs", []) if e["epoch"] <= initial_epoch]
    if world.is_chief and initial_epoch:
        trim_csv_log(output_dir / "training_log.csv", initial_epoch)
    previous_wall = float(metrics.get("wall_time_s", 0.0)) if initial_epoch else 0.0
    metrics.update(
        {
            "ranks": world.size,
            "run": {
                "epochs": epochs,
                "epoch_policy": t.epoch_policy.value,
                "batch_size_per_rank": t.batch_size,
                "global_batch_size": t.batch_size * world.size,
                "lr_config": cfg.optimizer.lr,
                "lr_scaled": lr,
                "lr_scaling": t.lr_scaling.value,
                "optimizer": cfg.optimizer._target_.rsplit(".", 1)[-1],
                "model": cfg.model._target_,
                "precision": policy,
                "data": data.source,
                "train_images": int(len(data.x_train)),
                "test_images": int(len(data.x_test)),
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

    callbacks = [
        EpochTimer(train_data.images_per_rank_epoch * world.size),
        # HOROVOD: average the epoch's metrics over ranks, before anything logs them.
        hvd.callbacks.MetricAverageCallback(),
        *recipe.callbacks(model),  # BatchNorm statistics averaged across ranks, before any writer
    ]
    if t.warmup_epochs > 0:
        # HOROVOD: ramp the lr from lr/size to lr over the first epochs
        # (Goyal et al.), so the large effective batch does not diverge early.
        callbacks.append(
            hvd.callbacks.LearningRateWarmupCallback(
                initial_lr=lr, warmup_epochs=t.warmup_epochs, steps_per_epoch=train_data.steps_per_epoch,
                verbose=1 if world.is_chief else 0,
            )
        )
    for i, start in enumerate(sorted(t.lr_decay_epochs)):
        ends = sorted(t.lr_decay_epochs)[i + 1] if i + 1 < len(t.lr_decay_epochs) else None
        callbacks.append(
            hvd.callbacks.LearningRateScheduleCallback(
                initial_lr=lr, multiplier=t.lr_decay_factor ** (i + 1), start_epoch=start, end_epoch=ends,
                steps_per_epoch=train_data.steps_per_epoch,
            )
        )
    if t.deterministic:
        callbacks.append(ReseedEachEpoch(t.seed + world.rank))
    if t.max_epochs_per_run:
        callbacks.append(StopAfterEpochs(t.max_epochs_per_run))
    if world.is_chief:
        # HOROVOD: only rank 0 writes, so ranks never corrupt each other's files.
        callbacks.append(tf.keras.callbacks.CSVLogger(str(output_dir / "training_log.csv"), append=bool(initial_epoch)))
        if t.tensorboard:
            callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=str(output_dir / "tensorboard"), profile_batch=0))
        run_start = time.time()
        # Records first, checkpoint last: a kill between the two makes the
        # re-run redo (and re-record) that epoch instead of losing its record.
        callbacks.append(
            MetricsRecorder(
                metrics_path, metrics,
                on_update=lambda m: m.update(wall_time_s=previous_wall + time.time() - run_start),
            )
        )
        callbacks.append(AtomicCheckpoint(checkpoint_dir, t.keep_checkpoints))

    if initial_epoch < epochs:
        model.fit(
            train_data.dataset,
            epochs=epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=train_data.steps_per_epoch,
            validation_data=val_data.dataset,
            validation_steps=val_data.steps,
            callbacks=callbacks,
            verbose=t.verbose if world.is_chief else 0,
        )

    recipe.sync_model(model)  # BatchNorm moving statistics: one set for the job
    # HOROVOD: with averaged gradients every rank ends with the same weights;
    # record each rank's fingerprint so a broken averaging is visible.
    digests = hvd_tf.allgather_object(weights_digest(model))
    peak_rss = hvd_tf.allgather_object(peak_rss_mb())
    if world.is_chief:
        metrics["peak_rss_mb_per_rank"] = peak_rss
        metrics["rank_weight_digests"] = digests
        metrics["ranks_in_sync"] = len(set(digests)) == 1
        if not metrics["ranks_in_sync"]:
            log.warning("ranks ended with different weights: %s", digests)

    done = max([e["epoch"] for e in metrics.get("epochs", [])] + [initial_epoch]) if world.is_chief else 0
    done = hvd_tf.broadcast_object(done, root_rank=0)
    finished = done >= epochs
    if finished:
        test_stream = eval_stream(
            data.x_test, data.y_test, batch_size=t.batch_size, rank=world.rank, size=world.size,
            equal_shards=False, num_classes=cfg.model.num_classes,
        )
        metrics.update(recipe.final_test(
            model, lambda m: _evaluate_exact(m, test_stream, hvd_tf), t.tta.value, compile_kwargs))
    if world.is_chief:
        rates = [e["images_per_sec"] for e in metrics["epochs"] if "images_per_sec" in e]
        steady = rates[1:] or rates  # the first epoch includes tracing
        metrics["images_per_sec"] = statistics.median(steady) if steady else None
        metrics["wall_time_s"] = previous_wall + time.time() - wall_start
        if finished:
            metrics["complete"] = True
            if t.save_model:
                model_path = output_dir / "saved_models" / MODEL_NAME
                checkpoints.atomic_save_model(model, model_path, include_optimizer=False)
                metrics["model_path"] = str(model_path.relative_to(output_dir))
                log.info("Saved trained model at %s", model_path)
            log.info("Test loss: %.4f", metrics["test"]["loss"])
            log.info("Test accuracy: %.4f", metrics["test"]["accuracy"])
        else:
            log.info("stopped after epoch %d of %d (trainer.max_epochs_per_run); re-run to resume", done, epochs)
        if t.plot and metrics["epochs"]:
            plot_learning_curves(metrics["epochs"], output_dir / "learning_curves.png",
                                 title=f"{metrics['run']['model'].rsplit('.', 2)[-2]} on {cfg.data.name}, {world.size} rank(s)")
        write_json(metrics_path, metrics)
    return hvd_tf.broadcast_object(metrics if world.is_chief else None, root_rank=0)
