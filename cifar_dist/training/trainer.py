"""The training loop: the seed script, done properly.

``train(cfg, output_dir)`` runs on every rank (one process, or N under
mpirun / Slurm / Batch AI) and reads as the seed script's steps: start the
run, build the model, restore or start, make the data streams, start the
record, fit with the callbacks, finish (score, save, write). What makes the
ranks one job (averaged gradients, rank 0's weights everywhere, averaged
metrics) is the engine's (``training/engines/``); each step that needs it is
marked ENGINE: with why, as Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py
marks its Horovod lines.

The steps' parts live beside it: the model's build, checks and compile in
``model_setup.py``, what the run records about itself (metrics.json) in
``run_records.py``, the final test's exact scores in ``exact_test.py``, the
run's state in ``run.py``; what
differs by engine is the engine's, and this module imports neither Horovod
nor JAX.

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

import logging
import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator

from omegaconf import DictConfig

from cifar_dist.common.atomic_files import remove_partials
from cifar_dist.common.errors import CifarDistError, ConfigError
from cifar_dist.common.keras_flavor import KERAS2
from cifar_dist.config.schema import typed
from cifar_dist.config.validation import validate
from cifar_dist.data import load_dataset
from cifar_dist.data.checks import check_same_on_every_rank
from cifar_dist.data.sampling import steps_per_epoch
from cifar_dist.models import checks as model_checks
from cifar_dist.models.builder import check_builder
from cifar_dist.models.keras_checks import import_failure
from cifar_dist.rundir import checkpoints
from cifar_dist.rundir.fingerprint import check_loaded_data
from cifar_dist.training import model_setup, run_records
from cifar_dist.training.engines import start_engine
from cifar_dist.training.exact_test import evaluate_exact
from cifar_dist.training.process.keras_setup import prepare_keras
from cifar_dist.training.recipe import hooks as recipe
from cifar_dist.training.run import Run

log = logging.getLogger(__name__)


class ResumeError(CifarDistError, RuntimeError):
    pass


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
    metrics, previous_wall = run_records.start_record(run, initial_epoch, policy, data, train_data)
    with interrupts_kept() as kept_interrupt:  # a Ctrl-C Python could not raise is raised at the next batch
        tracker = open_tracker(run)
        if initial_epoch < run.epochs:
            callbacks = make_callbacks(run, model, train_data, metrics, initial_epoch, previous_wall, tracker)
            # ENGINE: Keras' fit over tf.data (Horovod, TensorFlow), or its JAX loop fed from the device (JAX)
            run.engine.fit(
                model,
                train_data,
                val_data,
                epochs=run.epochs,
                initial_epoch=initial_epoch,
                validation_freq=validation_epochs(run.trainer.validate_every, run.epochs),
                callbacks=[kept_interrupt, *callbacks],
                verbose=run.trainer.verbose if run.world.is_chief else 0,
                steps_per_execution=int(run.trainer.steps_per_execution),
                execution=run.trainer.execution.value,
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
    engine.check_jit_compile(bool(t.jit_compile))  # what XLA can compile differs by engine
    try:
        check_builder(cfg.model)  # imported now, after the engine's start; checked against its signature
    except ConfigError as exc:
        raise import_failure(exc, cfg.engine.name) from None
    flavor = model_setup.probe_model_flavor(cfg)  # before any data is read: a model that cannot train here fails now
    engine.distribute_models()  # ENGINE (JAX): every model built from here on is one model over all processes
    on_tensorflow = flavor == KERAS2 or engine.facts.needs_tensorflow
    policy = prepare_keras(
        flavor,
        engine.rank_seed(t.seed),
        t.precision.value,
        bool(engine.world.gpu),
        bool(t.deterministic),
        on_tensorflow,
    )
    run = Run(
        cfg=cfg,
        engine=engine,
        output_dir=output_dir,
        epochs=planned_epochs(t, engine.world.ranks),  # ENGINE: a rank is a device (world.py)
        lr=scaled_lr(cfg.optimizer.lr, t.lr_scaling.value, engine.world.ranks),
        flavor=flavor,
        wall_start=wall_start,
    )
    return run, policy


def load_data(run: Run):
    """The configured data set, in memory (every rank reads it; streams take their part)."""
    # ENGINE: engine=jax trains on arrays in memory (an image folder decoded, a tf.data factory read through)
    data = load_dataset(
        run.cfg.data,
        run.trainer.seed,
        arrays=not run.engine.facts.keras_fit,
        processes_here=run.world.local_processes,  # each reads its own copy: they share the memory budget
    )
    check_same_on_every_rank(data, run.engine.allgather_object)  # a factory giving ranks different data: named
    if run.world.is_chief:
        log.info("data: %s", data.source)
        log.info("%d train samples, %d test samples, %d classes", data.train_size, data.test_size, data.num_classes)
    return data


def build_model(run: Run, data):
    """The configured model and optimizer, compiled, with the optimizer's slots created.

    Returns the model and the compile arguments the final (TTA) test reuses.
    """
    t, world = run.trainer, run.world
    # (model_kwargs: a model.num_classes that disagrees with the data is one line)
    model = model_setup.instantiate_model(
        run.cfg.model, model_setup.model_kwargs(run.cfg.model, data)["num_classes"], run.flavor
    )
    # the data's images and classes, softmax
    model_checks.check_model(model, data, run.cfg.model._target_, predict=run.engine.predict_here)
    # --- recipe (experiment=speedrun): data-fitted layers, per-step lr schedule, label smoothing ---
    recipe.fit_to_data(model, data)
    steps = steps_per_epoch(data.train_size, t.batch_size, world.ranks, t.epoch_policy.value == "shard")
    # ENGINE: warmup and step decay in the schedule, or (Horovod, Keras 2) in Horovod's lr callbacks
    ramps = run.engine.ramps_lr_in_schedule(run.flavor)
    lr_or_schedule = recipe.learning_rate(run.lr, t, steps, run.epochs, run.keras, world.ranks, ramps)
    compile_kwargs = dict(loss=recipe.loss(t.label_smoothing, run.keras), metrics=["accuracy"])
    model_setup.compile_distributed(
        run,
        model,
        model_setup.make_optimizer(run.cfg.optimizer, lr_or_schedule, run.flavor),
        compile_kwargs,
        # ENGINE: Keras 3's fit needs a divisor of the epoch's steps; engine=jax's loop runs any count
        model_setup.steps_per_call(run.flavor, steps, t.steps_per_execution)
        if run.engine.facts.keras_fit
        else t.steps_per_execution,
    )
    model_setup.create_optimizer_slots(model.optimizer, model.trainable_variables)
    return model, compile_kwargs


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
    run.engine.broadcast_model(model, list(model.weights) + model_setup.optimizer_variables(model.optimizer))
    return initial_epoch


def make_streams(run: Run, data, initial_epoch: int):
    """This process's training stream (from ``initial_epoch`` on: its ranks' batches) and its validation slice.

    ENGINE: tf.data pipelines (Horovod, TensorFlow: one rank a process) or each rank's images on its device (JAX)."""
    cfg, t, world = run.cfg, run.trainer, run.world
    train_data = run.engine.train_input(
        data,
        batch_size=t.batch_size,  # per rank
        rank=world.first_rank,
        size=world.ranks,
        shard=t.epoch_policy.value == "shard",
        seed=t.seed,
        initial_epoch=initial_epoch,
        epochs=run.epochs,
        augment=cfg.data.augment,
        shuffle_buffer=cfg.data.shuffle_buffer,
        prefetch=cfg.data.prefetch,
        placement=str(getattr(cfg.data.placement, "value", cfg.data.placement)),
    )
    # every process validates its own equal slice (on its first device); the engine averages them
    val_data = run.engine.eval_input(
        data, batch_size=t.batch_size, rank=world.process, size=world.processes, equal_shards=True
    )
    return train_data, val_data


def open_tracker(run: Run):
    """TRACKING (cifar_dist/tracking): rank 0 opens, or when resuming reopens, its MLflow run; None otherwise."""
    if not run.world.is_chief:
        return None
    from cifar_dist.tracking.job_hooks import open_for_training  # tracking is an optional extra: only when configured

    return open_for_training(run.cfg, run.output_dir, run.world.ranks, run_records.engine_versions(run))


def make_callbacks(
    run: Run, model, train_data, metrics: Dict[str, Any], initial_epoch: int, previous_wall: float, tracker=None
):
    """Keras callbacks in the order they must run: the engine's averaging first, writers (rank 0) last."""

    from cifar_dist.training.callbacks import (  # Keras callbacks: import TensorFlow
        AtomicCheckpoint,
        EpochTimer,
        ReseedEachEpoch,
        StopAfterEpochs,
        StopOnNonFinite,
    )
    from cifar_dist.training.preemption import stop_on_signal_from_env  # a Keras callback too

    t, world, lr, steps = run.trainer, run.world, run.lr, train_data.steps_per_epoch
    averaging = run.engine.metric_averaging(model)  # None where the metrics are the whole job's already (JAX)
    callbacks = [
        EpochTimer(train_data.images_per_rank_epoch * world.ranks),
        # ENGINE: average the epoch's metrics over ranks, before anything logs them.
        *([averaging] if averaging is not None else []),
        StopOnNonFinite(lr),  # NaN/inf: one-line error on every rank, nothing of that epoch written
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
        # Records first, checkpoint last: a kill between the two makes the
        # re-run redo (and re-record) that epoch instead of losing its record.
        callbacks += run_records.epoch_writers(run, metrics, initial_epoch, previous_wall)
        callbacks.append(AtomicCheckpoint(run.checkpoint_dir, t.keep_checkpoints, t.checkpoint_interval_s))
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
    world, t, engine = run.world, run.trainer, run.engine
    recipe.sync_model(model, engine)  # BatchNorm moving statistics: one set for the job
    run_records.record_ranks(engine, model, metrics)  # ENGINE: each rank's weight digest: a broken averaging shows
    done = run_records.last_epoch_done(metrics, initial_epoch) if world.is_chief else 0
    # ENGINE: rank 0 alone kept the record; every rank must agree whether to score.
    finished = engine.broadcast_object(done) >= run.epochs
    if finished:
        rank, size = engine.exact_test_slice()  # ENGINE: this rank's slice (JAX: every process feeds all of it)
        test_stream = engine.eval_input(data, batch_size=t.batch_size, rank=rank, size=size, equal_shards=False)
        metrics.update(
            recipe.final_test(
                model,
                lambda m, outputs=("",): evaluate_exact(m, test_stream, engine, outputs),
                t.tta.value,
                compile_kwargs,
            )
        )
    if world.is_chief:
        run_records.write_record(run, model, metrics, finished, done, previous_wall)
        if tracker is not None:  # TRACKING: test metrics, artifacts, FINISHED (KILLED when stopped early)
            tracker.finish(metrics)
    return engine.broadcast_object(metrics if world.is_chief else None)
