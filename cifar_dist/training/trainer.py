"""The training loop: the seed script, done properly.

``train(cfg, output_dir)`` runs on every rank (one process, or N under
mpirun / Slurm / Batch AI) and reads as the seed script's steps: start the
run, build the model, restore or start, make the data streams, start the
record, fit with the callbacks, finish (score, save, write). What makes the
ranks one job (averaged gradients, rank 0's weights everywhere, averaged
metrics) is the engine's (``training/engines/``); each step that needs it is
marked ENGINE: with why, as Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py
marks its Horovod lines.

The model may be Keras 2 (tf.keras) or Keras 3 (``import keras``): the
trainer builds with the Keras the model option asks for (a built-in's
``engine.keras``, a user's builder's own imports) and asks the built model
which Keras it is (``keras_flavor``); loss, optimizer, callbacks and
checkpoints follow it.

Imports: this module is imported in a rank only, but before ``train`` has
read its config, and TensorFlow reads some of that config once, when it is
first imported (``trainer.onednn``: the engine's start sets it, then imports
TensorFlow). So TensorFlow, Keras, the engine and the project modules that
import them at module level are imported inside the steps that run after
``start_run``; everything else is imported here.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import resource
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List

import hydra.utils
from omegaconf import DictConfig

from cifar_dist.common.atomic_files import remove_partials, write_json
from cifar_dist.common.errors import CifarDistError, ConfigError
from cifar_dist.common.keras_flavor import KERAS2, KERAS3, keras_argument, keras_module, version_of
from cifar_dist.common.results import METRICS_FILE
from cifar_dist.config.schema import typed
from cifar_dist.config.validation import validate
from cifar_dist.data import load_dataset
from cifar_dist.data.checks import check_same_on_every_rank
from cifar_dist.models import checks as model_checks
from cifar_dist.models.builder import check_builder
from cifar_dist.models.keras_checks import build_failure, check_model, import_failure
from cifar_dist.rundir import checkpoints
from cifar_dist.rundir.fingerprint import check_loaded_data
from cifar_dist.training.artifacts import plot_learning_curves, read_metrics_to_resume, trim_csv_log
from cifar_dist.training.engines import start_engine
from cifar_dist.training.process.keras_setup import prepare_keras
from cifar_dist.training.recipe import hooks as recipe

log = logging.getLogger(__name__)


class ResumeError(CifarDistError, RuntimeError):
    pass


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


def _decide_resume(world, engine, checkpoint_dir: Path, mode: str, model) -> int:
    """Rank 0 decides whether to resume; the newest good checkpoint is restored; every rank learns its epoch.

    ENGINE: only rank 0 reads the checkpoint files (on several hosts the
    others may not even see them); the engine restores (Horovod: into rank
    0's model, whose weights and optimizer state train() then broadcasts;
    JAX: into every process's, from the bytes rank 0 read), and the epoch to
    start from is broadcast here so all ranks agree.
    """
    decision = (False, None)
    if world.is_chief:
        # Temp files of writes a kill -9 interrupted (never under a real name).
        remove_partials(checkpoint_dir.parent, checkpoint_dir, checkpoint_dir.parent / "saved_models")
        existing = checkpoints.list_checkpoints(checkpoint_dir)
        if mode == "false" and existing:
            decision = (
                False,
                f"{checkpoint_dir} already holds checkpoints; resume with trainer.resume=true "
                "or start a new run dir (hydra.run.dir=...)",
            )
        elif mode in ("auto", "true") and existing:
            decision = (True, None)
        elif mode == "true":
            decision = (False, f"trainer.resume=true but {checkpoint_dir} holds no checkpoint; use trainer.resume=auto")
    restore, error = engine.broadcast_object(decision)
    if error:
        raise ResumeError(error)
    if not restore:
        return 0
    restored = engine.restore_latest(model, checkpoint_dir)  # ENGINE: rank 0 alone (Horovod) or every process (JAX)
    if world.is_chief and restored.path is None:
        decision = (
            -1,
            f"no checkpoint in {checkpoint_dir} loads ({'; '.join(restored.skipped)}); move them aside to start fresh",
        )
    else:
        decision = (restored.epoch, None)
    epoch, error = engine.broadcast_object(decision)
    if error:
        raise ResumeError(error)
    return epoch


def _evaluate_exact(model, stream, engine, outputs=("",)) -> List[Dict[str, float]]:
    """Test loss/accuracy over the whole test set, equal to a single-rank run, for each of the
    model's ``outputs`` (the prefixes of their metric names; "" for a one-output model).

    Every rank evaluates its own slice (all ranks together cover each image
    once); sums, not means, are combined, so uneven slices weigh right.
    """
    logs = {}
    if stream.samples:
        logs = model.evaluate(
            labels_for_each_output(stream.dataset, outputs), steps=stream.steps, verbose=0, return_dict=True
        )
    # Keras reports a float32 mean; the count of correct images behind it is
    # exact after rounding, so the combined accuracy is an exact fraction.
    mine = [
        (
            float(logs.get(f"{o}loss", 0.0)) * stream.samples,
            round(float(logs.get(f"{o}accuracy", 0.0) * stream.samples)),
        )
        for o in outputs
    ]
    # ENGINE: one collective for the numbers of every rank; ranks that scored the same slice count once
    # (JAX: every process scores all of it, and its numbers are the whole job's).
    parts = list(dict(engine.allgather_object((engine.exact_test_slice(), (mine, stream.samples)))).values())
    total = sum(p[1] for p in parts)
    results = []
    for i in range(len(outputs)):
        correct = sum(p[0][i][1] for p in parts)
        results.append(
            {
                "loss": sum(p[0][i][0] for p in parts) / total,
                "accuracy": correct / total,
                "correct": int(correct),
                "samples": int(total),
            }
        )
    return results


def labels_for_each_output(dataset, outputs):
    """``dataset``'s (images, labels) as a model with several named outputs takes them: the labels once per
    output, keyed by its name (the metric prefix without its "_"). Keras 2 took one label tensor for all
    outputs; Keras 3 wants the outputs' own structure."""
    if len(outputs) == 1:
        return dataset
    names = [o.rstrip("_") for o in outputs]
    return dataset.map(lambda images, labels: (images, {name: labels for name in names}))


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
    engine: Any  # training/engines: what makes the ranks one job
    output_dir: Path
    epochs: int  # planned for this world size
    lr: float  # scaled for this world size
    flavor: int  # the Keras the model is built with: 2 (tf.keras) or 3 (keras)
    wall_start: float = field(default_factory=time.time)

    @property
    def world(self):
        return self.engine.world

    @property
    def keras(self):
        return keras_module(self.flavor)

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
    with peer_failure_in_one_line(run.engine):
        return _train(run, policy)


@contextmanager
def peer_failure_in_one_line(engine) -> Iterator[None]:
    """An error that says another process of the job died (``engine.peer_failure``) becomes the engine's one
    line, raised on every surviving process; any other error passes unchanged."""
    try:
        yield
    except Exception as exc:
        lost = engine.peer_failure(exc)
        if lost is None:
            raise
        raise lost from None


def _train(run: Run, policy) -> Dict[str, Any]:
    from cifar_dist.training.process.interrupts import interrupts_kept  # a Keras callback: imports TensorFlow

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
                shuffle=False,  # the stream is shuffled already (data/pipeline.py); Keras 3 warns otherwise
                verbose=run.trainer.verbose if run.world.is_chief else 0,
            )
        return finish(run, model, data, metrics, initial_epoch, previous_wall, tracker, compile_kwargs)


def start_run(cfg: DictConfig, output_dir: Path):
    """Validate the config (unless this process did: app.py), start the engine, and check the model before any
    data is read."""
    wall_start = time.time()
    cfg = typed(cfg)
    validate(cfg)  # a copy of a validated config keeps the mark: nothing is checked again
    t = cfg.trainer
    engine = start_engine(cfg.engine.name, t)  # TensorFlow loads only now, with the CPU kernels it chose
    if not engine.xla_only:
        check_jit_compile(bool(t.jit_compile), bool(engine.world.gpu))
    try:
        check_builder(cfg.model)  # imported now, after the engine's start; checked against its signature
    except ConfigError as exc:
        raise import_failure(exc, cfg.engine.name) from None
    flavor = probe_model_flavor(cfg)  # before any data is read: a model that cannot train here fails now
    engine.distribute_models()  # ENGINE (JAX): every model built from here on is one model over all processes
    policy = prepare_keras(
        flavor, engine.rank_seed(t.seed), t.precision.value, bool(engine.world.gpu), bool(t.deterministic)
    )
    run = Run(
        cfg=cfg,
        engine=engine,
        output_dir=output_dir,
        epochs=planned_epochs(t, engine.world.size),
        lr=scaled_lr(cfg.optimizer.lr, t.lr_scaling.value, engine.world.size),
        flavor=flavor,
        wall_start=wall_start,
    )
    return run, policy


def instantiate_model(model_cfg, num_classes: int, keras_version: int):
    """The model option's builder called with ``num_classes`` and, if it declares the parameter, the Keras to use."""
    keras = keras_argument(hydra.utils.get_method(model_cfg._target_), keras_version)
    return hydra.utils.instantiate(model_cfg, num_classes=num_classes, **keras)


def probe_model_flavor(cfg) -> int:
    """Build the model once with a stand-in class count and check it (one Keras, the engine's backend,
    saveable): returns its Keras. The real model is built once the data says how many classes there are."""
    asked = cfg.model.get("num_classes")
    try:
        probe = instantiate_model(cfg.model, int(asked) if asked is not None else 10, cfg.engine.keras)
    except Exception as exc:  # the builder's own error, whatever it is: one line naming the builder
        raise build_failure(exc, cfg.model._target_) from None
    flavor = check_model(probe, cfg.model._target_, cfg.engine.name)
    # Forget the probe: the real model's layers get the names they would have had without it
    # ("scale", not "scale_1"), as saved models, checkpoints and messages show them.
    del probe
    keras_module(flavor).backend.clear_session()
    return flavor


def load_data(run: Run):
    """The configured data set, in memory (every rank reads it; streams take their part)."""
    data = load_dataset(run.cfg.data, run.trainer.seed)
    check_same_on_every_rank(
        data, run.engine.allgather_object
    )  # a factory giving ranks different data: named, no stall
    if run.world.is_chief:
        log.info("data: %s", data.source)
        log.info("%d train samples, %d test samples, %d classes", data.train_size, data.test_size, data.num_classes)
    return data


def model_kwargs(model_cfg, data) -> Dict[str, Any]:
    """The model builder's ``num_classes``: the data's; a model.num_classes that disagrees is refused."""
    asked = model_cfg.get("num_classes")
    if asked is not None and int(asked) != data.num_classes:
        raise ConfigError(
            f"model.num_classes={asked} but {data.source} has {data.num_classes} classes; "
            "leave model.num_classes unset (it comes from the data)"
        )
    return {"num_classes": data.num_classes}


def build_model(run: Run, data):
    """The configured model and optimizer, compiled, with the optimizer's slots created.

    Returns the model and the compile arguments the final (TTA) test reuses.
    """
    from cifar_dist.data.pipeline import steps_per_epoch  # imports TensorFlow

    t, world = run.trainer, run.world
    # (model_kwargs: a model.num_classes that disagrees with the data is one line)
    model = instantiate_model(run.cfg.model, model_kwargs(run.cfg.model, data)["num_classes"], run.flavor)
    # the data's images and classes, softmax
    model_checks.check_model(model, data, run.cfg.model._target_, predict=run.engine.predict_here)
    # --- recipe (experiment=speedrun): data-fitted layers, per-step lr schedule, label smoothing ---
    recipe.fit_to_data(model, data)
    steps = steps_per_epoch(data.train_size, t.batch_size, world.size, t.epoch_policy.value == "shard")
    # ENGINE: warmup and step decay in the schedule, or (Horovod, Keras 2) in Horovod's lr callbacks
    ramps = run.engine.ramps_lr_in_schedule(run.flavor)
    lr_or_schedule = recipe.learning_rate(run.lr, t, steps, run.epochs, run.keras, world.size, ramps)
    compile_kwargs = dict(loss=recipe.loss(t.label_smoothing, run.keras), metrics=["accuracy"])
    compile_distributed(
        run,
        model,
        make_optimizer(run.cfg.optimizer, lr_or_schedule, run.flavor),
        compile_kwargs,
        steps_per_call(run.flavor, steps, t.steps_per_execution),
    )
    create_optimizer_slots(model.optimizer, model.trainable_variables)
    return model, compile_kwargs


def make_optimizer(optimizer_cfg, lr_or_schedule, flavor: int):
    """The optimizer option's factory called with the lr (a float or a schedule) and, if it declares it, the Keras."""
    # (_partial_: a LearningRateSchedule is no float for the typed config node)
    factory = hydra.utils.instantiate(optimizer_cfg, _partial_=True)
    return factory(lr=lr_or_schedule, **keras_argument(factory.func, flavor))


def steps_per_call(flavor: int, steps_per_epoch: int, asked: int) -> int:
    """trainer.steps_per_execution as the model's Keras can honour it.

    Keras 2 ends an epoch's last call early. Keras 3 runs whole calls: with 63
    steps an epoch and 16 a call it trains 64 and takes the next epoch's first
    batch, so epochs no longer match their data (and a resumed run differs from
    one never stopped). For Keras 3 the largest divisor of the epoch's steps up
    to ``asked`` is used."""
    if flavor == KERAS2 or steps_per_epoch % asked == 0:
        return asked
    fitting = max(d for d in range(1, min(asked, steps_per_epoch) + 1) if steps_per_epoch % d == 0)
    log.info(
        "trainer.steps_per_execution=%d runs as %d (Keras 3 needs a divisor of the epoch's %d steps)",
        asked,
        fitting,
        steps_per_epoch,
    )
    return fitting


def compile_distributed(run: Run, model, optimizer, compile_kwargs, steps_per_execution: int) -> None:
    """Compile ``model`` with ``optimizer`` made to average its gradients over the ranks.

    ENGINE: Keras 2's distributed optimizer is Horovod's wrapper, given to
    compile; a Keras 3 optimizer is wrapped as compile left it (Keras 3 puts a
    LossScaleOptimizer around it under mixed_float16, whose finiteness check
    must see the averaged gradients, or ranks could disagree on skipping a step).
    """
    t = run.trainer
    compression = t.compression.value
    if run.flavor == KERAS2:
        optimizer = run.engine.distributed_optimizer(optimizer, compression)
    model.compile(
        optimizer=optimizer,
        **compile_kwargs,
        jit_compile=run.engine.xla_only or bool(t.jit_compile),
        steps_per_execution=steps_per_execution,
    )
    if run.flavor == KERAS3:
        run.engine.distributed_optimizer(model.optimizer, compression)


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


def optimizer_variables(optimizer) -> list:
    """The optimizer's variables (a method in Keras 2, a property in Keras 3)."""
    found = optimizer.variables
    return list(found() if callable(found) else found)


def restore_or_start(run: Run, model) -> int:
    """The epoch to start after: rank 0 restores a checkpoint, every rank gets its weights."""
    initial_epoch = _decide_resume(run.world, run.engine, run.checkpoint_dir, str(run.trainer.resume).lower(), model)
    if run.world.is_chief and initial_epoch:
        log.info(
            "resuming after epoch %d from %s",
            initial_epoch,
            checkpoints.checkpoint_path(run.checkpoint_dir, initial_epoch, checkpoints.model_suffix(model)),
        )
    # ENGINE: copy rank 0's initial (or restored) weights and optimizer state
    # to every rank before the first step. Horovod's Keras examples use
    # BroadcastGlobalVariablesCallback, which waits for the first batch to end
    # because the optimizer's slots do not exist before it; here they do (see
    # build_model), so no rank ever steps from weights of its own, not even for
    # the first steps_per_execution steps (the callback's "first batch").
    # The model's weights, not its random-seed states: each rank keeps drawing its own dropout.
    run.engine.broadcast_model(model, list(model.weights) + optimizer_variables(model.optimizer))
    return initial_epoch


def make_streams(run: Run, data, initial_epoch: int):
    """This rank's training stream (from ``initial_epoch`` on) and its validation slice."""
    from cifar_dist.data.streams import eval_input, train_input  # imports TensorFlow

    cfg, t, world = run.cfg, run.trainer, run.world
    train_data = train_input(
        data,
        batch_size=t.batch_size,
        rank=world.rank,
        size=world.size,
        shard=t.epoch_policy.value == "shard",
        seed=t.seed,
        initial_epoch=initial_epoch,
        epochs=run.epochs,
        augment=cfg.data.augment,
        shuffle_buffer=cfg.data.shuffle_buffer,
        prefetch=cfg.data.prefetch,
    )
    val_data = eval_input(data, batch_size=t.batch_size, rank=world.rank, size=world.size, equal_shards=True)
    return train_data, val_data


def start_record(run: Run, initial_epoch: int, policy: str, data, train_data):
    """metrics.json's content so far (rank 0; records after the restored epoch dropped) and its wall time."""
    import tensorflow as tf  # after the engine's start (module docstring)

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
                "engine": run.engine.name,
                "engine_reason": run.cfg.engine.why or f"engine={run.engine.name} as configured",
                "keras": version_of(run.keras),
                **run.engine.versions(),
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
    from cifar_dist.tracking.job_hooks import open_for_training  # tracking is an optional extra: only when configured

    engine = {"engine": run.engine.name, "keras": version_of(run.keras), **run.engine.versions()}
    return open_for_training(run.cfg, run.output_dir, run.world.size, engine)


def make_callbacks(
    run: Run, model, train_data, metrics: Dict[str, Any], initial_epoch: int, previous_wall: float, tracker=None
):
    """Keras callbacks in the order they must run: the engine's averaging first, writers (rank 0) last."""

    from cifar_dist.training.callbacks import (  # Keras callbacks: import TensorFlow
        AtomicCheckpoint,
        EpochCSVLogger,
        EpochTimer,
        MetricsRecorder,
        ReseedEachEpoch,
        StopAfterEpochs,
        StopOnNonFiniteLoss,
    )
    from cifar_dist.training.preemption import stop_on_signal_from_env  # a Keras callback too

    t, world, lr, steps = run.trainer, run.world, run.lr, train_data.steps_per_epoch
    averaging = run.engine.metric_averaging(model)  # None where the metrics are the whole job's already (JAX)
    callbacks = [
        EpochTimer(train_data.images_per_rank_epoch * world.size),
        # ENGINE: average the epoch's metrics over ranks, before anything logs them.
        *([averaging] if averaging is not None else []),
        StopOnNonFiniteLoss(lr),  # NaN/inf: one-line error on every rank, nothing of that epoch written
        # lookahead; BatchNorm statistics averaged across ranks, before any writer
        *recipe.callbacks(model, t, steps * run.epochs, run.engine),
    ]
    callbacks += run.engine.lr_callbacks(run.flavor, t, lr, steps, world.is_chief)  # (or in the lr schedule)
    if t.deterministic:
        callbacks.append(ReseedEachEpoch(run.engine.rank_seed(t.seed)))
    if t.max_epochs_per_run:
        callbacks.append(StopAfterEpochs(t.max_epochs_per_run))
    stop_on_signal = stop_on_signal_from_env(engine=run.engine)  # a cluster launcher's "time is nearly up" signal
    if stop_on_signal is not None:
        callbacks.append(stop_on_signal)
    if world.is_chief:
        # HOROVOD: only rank 0 writes, so ranks never corrupt each other's files.
        callbacks.append(EpochCSVLogger(str(run.output_dir / "training_log.csv"), append=bool(initial_epoch)))
        if t.tensorboard:
            callbacks.append(run.keras.callbacks.TensorBoard(log_dir=str(run.output_dir / "tensorboard")))
        run_start = time.time()
        # Records first, checkpoint last: a kill between the two makes the
        # re-run redo (and re-record) that epoch instead of losing its record.
        callbacks.append(
            MetricsRecorder(
                run.metrics_path,
                metrics,
                on_update=lambda m: m.update(wall_time_s=previous_wall + time.time() - run_start),
            )
        )
        callbacks.append(AtomicCheckpoint(run.checkpoint_dir, t.keep_checkpoints))
    if tracker is not None:  # TRACKING: log each epoch once it is on disk
        callbacks.append(tracker.callback())
    return callbacks


def finish(
    run: Run,
    model,
    data,
    metrics: Dict[str, Any],
    initial_epoch: int,
    previous_wall: float,
    tracker=None,
    compile_kwargs=None,
):
    """Check the ranks agree, score the test set once training is done, save and write the record."""
    from cifar_dist.data.streams import eval_input  # imports TensorFlow

    world, t, engine = run.world, run.trainer, run.engine
    recipe.sync_model(model, engine)  # BatchNorm moving statistics: one set for the job
    # ENGINE: with averaged gradients every rank ends with the same weights;
    # record each rank's fingerprint so a broken averaging is visible.
    digests = engine.allgather_object(weights_digest(model))
    peak_rss = engine.allgather_object(peak_rss_mb())
    if world.is_chief:
        metrics["peak_rss_mb_per_rank"] = peak_rss
        metrics["rank_weight_digests"] = digests
        metrics["ranks_in_sync"] = len(set(digests)) == 1
        if not metrics["ranks_in_sync"]:
            log.warning("ranks ended with different weights: %s", digests)

    done = max([e["epoch"] for e in metrics.get("epochs", [])] + [initial_epoch]) if world.is_chief else 0
    # ENGINE: rank 0 alone kept the record; every rank must agree whether to score.
    finished = engine.broadcast_object(done) >= run.epochs
    if finished:
        rank, size = engine.exact_test_slice()  # ENGINE: this rank's slice (JAX: every process feeds all of it)
        test_stream = eval_input(data, batch_size=t.batch_size, rank=rank, size=size, equal_shards=False)
        metrics.update(
            recipe.final_test(
                model,
                lambda m, outputs=("",): _evaluate_exact(m, test_stream, engine, outputs),
                t.tta.value,
                compile_kwargs,
            )
        )
    if world.is_chief:
        _write_record(run, model, metrics, finished, done, previous_wall)
        if tracker is not None:  # TRACKING: test metrics, artifacts, FINISHED (KILLED when stopped early)
            tracker.finish(metrics)
    return engine.broadcast_object(metrics if world.is_chief else None)


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
            model_path = checkpoints.saved_model_path(run.output_dir, checkpoints.model_suffix(model))
            checkpoints.atomic_save_model(model, model_path, include_optimizer=False)
            metrics["model_path"] = str(model_path.relative_to(run.output_dir))
            log.info("Saved trained model at %s", model_path)
        log.info("Test loss: %.4f", metrics["test"]["loss"])
        log.info("Test accuracy: %.4f", metrics["test"]["accuracy"])
    else:
        log.info(
            "stopped after epoch %d of %d (trainer.max_epochs_per_run or a stop signal); re-run to resume",
            done,
            run.epochs,
        )
    if t.plot and metrics["epochs"]:
        plot_learning_curves(
            metrics["epochs"],
            run.output_dir / "learning_curves.png",
            title=f"{metrics['run']['model'].rsplit('.', 2)[-2]} on {run.cfg.data.name}, {run.world.size} rank(s)",
        )
    write_json(run.metrics_path, metrics)
