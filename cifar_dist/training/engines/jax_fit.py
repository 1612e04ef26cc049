"""engine=jax's ``fit`` and ``evaluate``: Keras 3's own JAX loop, fed from the device instead of an iterator.

Keras' ``JAXTrainer.fit`` pulls each batch from a host iterator, copies it to
the devices and dispatches one compiled step per batch: at the seed's batch of
32 a GPU waits on that host work at every step. Here the same parts run with
the batches drawn on the device (``jax_data.py``), and ``steps_per_execution``
steps are one compiled ``fori_loop``, one dispatch, whatever the number of
steps per epoch (the last execution of an epoch runs fewer, in the same
compiled code). What stays as in Keras, so that models and callbacks behave as
under ``model.fit``:

- the step is the model's own ``train_step(state, data)`` (a user's override
  included) on Keras' JAX state ``(trainable, non_trainable, optimizer,
  metrics)`` variables, donated to the step;
- callbacks run through ``keras.callbacks.CallbackList`` (History, the progress
  bar at ``verbose``); a callback's batch hooks, when it has any, run once per
  execution, as Keras runs them with ``steps_per_execution``; a callback that
  reads ``self.model`` mid-epoch gets the state written back first
  (``jax_state_sync``, Keras' own mechanism), and what it assigns is read again
  before the next step;
- an epoch's logs are the model's metric results, as Keras' fit reports them
  (the last step's logs, which Keras' own ``train_step`` computes inside the
  compiled step; a model with its own ``train_step`` or ``compute_metrics``
  is asked for them);
- validation and the final test are ``test_step``, with metrics over the
  whole set (a last short batch included).

Evaluation runs in each process alone, on its first device, with its copy of
the replicated weights: the slices of the test set are the engine's
(``exact_test_slice``) and the scores are combined as sums by the trainer.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Dict, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.keras_callback import implements_batch_hooks
from cifar_dist.common.keras_internals import (
    hold_jax_state,
    jax_state,
    jax_state_synced,
    set_jax_state_synced,
    symbolic_build,
)
from cifar_dist.training.engines.jax_data import (
    AXIS,
    DeviceTrainSet,
    batch_fn,
    epoch_order,
    float_images,
    streamed_block,
)

log = logging.getLogger(__name__)


class DeviceOutOfMemory(CifarDistError, RuntimeError):
    """The device ran out of memory; the checkpoints written before stay."""


@contextmanager
def out_of_memory_in_one_line(what: str) -> Iterator[None]:
    """XLA's RESOURCE_EXHAUSTED (a device out of memory, its message a page of allocations) as one line that says
    what to change; every other error as it is."""
    try:
        yield
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        if "RESOURCE_EXHAUSTED" not in first:
            raise
        raise DeviceOutOfMemory(
            f"the device ran out of memory while {what} ({first[:160]}); lower trainer.batch_size, use a smaller "
            "model, or data.placement=stream to keep the training images on the host (the checkpoints written "
            "before stay: re-run to resume)"
        ) from None


EVAL_CHUNK_BATCHES = 64  # evaluation images go to the device this many batches at a time
KERAS_LOGS = ("train_step", "compute_metrics")  # Keras' methods whose step logs are the model's metric results


def _state(model, replicated) -> tuple:
    """Keras' JAX training state, taken off the model's variables (which Keras then empties until the sync), every
    array ``replicated`` on all devices: as each execution returns it, so that every call runs one program."""
    return jax.device_put(jax_state(model, purge_model_variables=True), replicated)


def _keep(model, state) -> None:
    """Hand ``state`` to the model as Keras' fit does: a callback's ``jax_state_sync`` writes it back."""
    hold_jax_state(model, state)


def _place(model, replicated) -> None:
    """The model's state on its variables, placed as every execution returns it: a callback that copies the
    weights at ``on_train_begin`` (the lookahead's slow copy) and compiles a program over them then gets the
    program it runs at every batch, instead of a second one compiled inside the first epoch."""
    _keep(model, _state(model, replicated))
    set_jax_state_synced(model, False)
    model.jax_state_sync()


class TrainSteps:
    """The compiled executions of ``train``: ``(state, order, epoch, first, count) -> (state, logs)``, at most
    ``per_call`` steps each.

    ``in_loop``: the ``count`` steps run as one compiled ``fori_loop`` (one dispatch: what a GPU wants), else as
    ``count`` dispatches of one compiled step (what a CPU wants: XLA:CPU runs a convolution net's step inside a
    loop ~7x slower than the same step on its own; docs/benchmarks.md). The same program draws the batches.

    The program is compiled when this is made, before the first epoch starts (``compile_seconds``: from JAX's
    persistent cache when an earlier run compiled it), so that epoch times are training alone."""

    def __init__(self, model, train: DeviceTrainSet, in_loop: bool, per_call: int):
        self.train, self.in_loop, self.per_call = train, in_loop, per_call
        batch = batch_fn(train)
        symbolic_build(model, _example(train))  # compile metrics and loss built, as Keras' fit builds them
        zero_logs = _zero_logs(model, train) if in_loop else None  # (the loop's carry; a trace of the step)

        def one_step(state, block, order, ranks, seed, epoch, step, first):
            x, y = batch(*block, order, ranks, seed, epoch, step, first)
            logs, state = model.train_step(state, (x, y))
            return state, logs

        def execution(state, block, order, ranks, seed, epoch, first, count):
            def step(i, carry):
                return one_step(carry[0], block, order, ranks, seed, epoch, first + i, first)

            return jax.lax.fori_loop(0, count, step, (state, zero_logs))

        # Every state array replicated on every device, going in (``_state``) and coming back: one program.
        self.replicated = NamedSharding(train.mesh, P())
        jitted = jax.jit(execution if in_loop else one_step, donate_argnums=0, out_shardings=(self.replicated, None))
        started = time.perf_counter()
        self._run = jitted.lower(*self._abstract_arguments(model)).compile()
        self.compile_seconds = time.perf_counter() - started

    def _abstract_arguments(self, model) -> tuple:
        """The arguments of a call, as shapes (the state, the epoch's order) or as they are (the images)."""
        train, scalar = self.train, jax.ShapeDtypeStruct((), jnp.int32)
        state = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=self.replicated), _state_shapes(model)
        )
        spread, devices = NamedSharding(train.mesh, P(AXIS)), train.mesh.devices.size
        if train.plan.streamed:
            width = devices * self.per_call * train.plan.batch_size
            block = tuple(jax.ShapeDtypeStruct((width, *a.shape[1:]), a.dtype, sharding=spread) for a in train.host)
            order = jax.ShapeDtypeStruct((width,), jnp.int32, sharding=spread)
        else:
            block = train.block
            order = jax.ShapeDtypeStruct((devices * train.owned_images,), jnp.int32, sharding=spread)
        return state, block, order, train.ranks, scalar, scalar, scalar, scalar

    def __call__(self, state, order, epoch: int, first: int, count: int):
        """``order``: ``epoch_order``'s (the local ranks' orders on the host where the data streams)."""
        train = self.train
        if train.plan.streamed:
            *block, order = streamed_block(train, order, first, self.per_call)
        else:
            block = train.block
        # numpy's scalars, not jnp's: a jnp scalar is a device array made per call (~25 us each, 4 a step)
        fixed = (tuple(block), order, train.ranks, np.int32(train.seed), np.int32(epoch))
        if self.in_loop:
            return self._run(state, *fixed, np.int32(first), np.int32(count))
        for step in range(first, first + count):
            state, logs = self._run(state, *fixed, np.int32(step), np.int32(first))
        return state, logs


def _zero_logs(model, train: DeviceTrainSet):
    """Zeros shaped as the step's logs: what the loop of an execution carries before its first step."""
    logs_shape = jax.eval_shape(model.train_step, _state_shapes(model), _example(train))[0]
    return jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), logs_shape)


def _example(train: DeviceTrainSet):
    """Abstract (x, y) of one global batch: what the step's logs are traced with."""
    images = train.host[0]
    devices = train.mesh.devices.size
    x = jax.ShapeDtypeStruct((devices * train.plan.batch_size, *images.shape[1:]), jnp.float32)
    y = jax.ShapeDtypeStruct((devices * train.plan.batch_size, train.plan.num_classes), jnp.float32)
    return x, y


def _state_shapes(model) -> tuple:
    groups = (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables)
    shapes = tuple([jax.ShapeDtypeStruct(v.shape, v.dtype) for v in group] for group in groups)
    return (*shapes, [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in model.metrics_variables])


def fit(
    model,
    train: DeviceTrainSet,
    *,
    epochs: int,
    initial_epoch: int,
    steps_per_execution: int,
    callbacks: Sequence,
    verbose: int,
    validation=None,
    validation_freq=1,
    average=None,
    execution: str = "auto",
    timings=None,
    programs=None,
):
    """Train ``model`` for epochs [initial_epoch, epochs), as ``model.fit`` would with the same callbacks.

    Validation scores are each process's own slice's (equal slices); ``average`` (the engine's
    ``average_numbers``, a collective) makes them the job's. ``timings`` gets ``compile_s``, the seconds the
    training step took to compile (or to load from JAX's persistent cache)."""
    import keras  # lazy: Keras 3 on JAX, after the engine's start

    steps = train.steps_per_epoch
    callbacks = keras.callbacks.CallbackList(
        list(callbacks),
        add_history=True,
        add_progbar=verbose != 0,
        verbose=verbose,
        epochs=epochs,
        steps=steps,
        model=model,
    )
    batch_hooks = any(implements_batch_hooks(c) for c in callbacks.callbacks)
    run = TrainSteps(model, train, in_loop=_loop_on_device(execution, train), per_call=steps_per_execution)
    if timings is not None:
        timings["compile_s"] = run.compile_seconds
    log.info(
        "compiled the training step in %.1f s (%s, %d steps per execution)",
        run.compile_seconds,
        "one loop per execution" if run.in_loop else "one step per dispatch",
        steps_per_execution,
    )
    model.stop_training = False
    logs: Dict = {}
    _place(model, run.replicated)  # before any callback copies a weight: copied as every later batch meets it
    callbacks.on_train_begin()
    try:
        for epoch in range(initial_epoch, epochs):
            model.reset_metrics()
            callbacks.on_epoch_begin(epoch)
            step_logs = _train_epoch(model, run, epoch, steps, steps_per_execution, callbacks if batch_hooks else None)
            logs = _epoch_logs(model, step_logs)
            if validation is not None and _validates(epoch, validation_freq):
                scores = evaluate(model, validation, callbacks=callbacks, programs=programs)
                if average is not None:
                    names = sorted(scores)
                    scores = dict(zip(names, (float(v) for v in average([scores[k] for k in names]))))
                logs.update({f"val_{name}": value for name, value in scores.items()})
            callbacks.on_epoch_end(epoch, logs)
            if model.stop_training:
                break
    finally:
        model.jax_state_sync()
        hold_jax_state(model, None)
        model.optimizer.finalize_variable_values(model.trainable_weights)
    callbacks.on_train_end(logs=logs)
    return model.history


def _loop_on_device(execution: str, train: DeviceTrainSet) -> bool:
    """``trainer.execution``: ``loop`` (an execution's steps in one compiled loop), ``steps`` (one compiled step
    per dispatch), ``auto``: the loop on accelerators, steps on CPUs (``TrainSteps``)."""
    if execution == "auto":
        return train.mesh.devices.flat[0].platform != "cpu"
    return execution == "loop"


def _train_epoch(model, run: TrainSteps, epoch: int, steps: int, per_call: int, batch_callbacks):
    """One epoch's executions; the state back on the model's variables (and every step done) when it returns.
    Returns the last step's logs (None when no step ran)."""
    order = epoch_order(run.train, epoch)
    set_jax_state_synced(model, True)
    step_logs = None
    for first in range(0, steps, per_call):
        count = min(per_call, steps - first)
        if batch_callbacks is not None:
            batch_callbacks.on_train_batch_begin(first)
        if jax_state_synced(model):  # the start, or a callback wrote the state back (and may have changed it)
            state = _state(model, run.replicated)
            set_jax_state_synced(model, False)
        state, step_logs = run(state, order, epoch, first, count)
        _keep(model, state)
        if batch_callbacks is not None:
            batch_callbacks.on_train_batch_end(first + count - 1, step_logs)
        if model.stop_training:
            break
    model.jax_state_sync()
    jax.block_until_ready([v.value for v in model.metrics_variables])  # the epoch's steps are done: timers are true
    return step_logs


def _epoch_logs(model, step_logs) -> Dict[str, float]:
    """The epoch's metrics: the model's metric results. Keras' own ``train_step`` computes them inside the compiled
    step (``compute_metrics``: ``get_metrics_result`` on the updated metric variables), so the last step's logs
    are them, read in one transfer; asking the model again computes them op by op on the host, each op compiled
    on its first use: 0.16 s of a 0.34 s first epoch on a CPU, cold (docs/benchmarks.md). A model with its own
    ``train_step`` or ``compute_metrics`` is asked, as Keras' fit asks it."""
    if step_logs is None or not _keras_computes_the_logs(model):
        results = model.get_metrics_result()
    else:  # scalars, the same on every device: this process's copy
        results = jax.device_get(jax.tree.map(lambda a: a.addressable_data(0), step_logs))
    return {name: float(value) for name, value in results.items()}


def _keras_computes_the_logs(model) -> bool:
    """Whether the model's ``train_step`` and ``compute_metrics`` are Keras' own (not a user's override)."""
    cls = type(model)
    return all(getattr(getattr(cls, name), "__module__", "").startswith("keras.") for name in KERAS_LOGS)


def _validates(epoch: int, freq) -> bool:
    """Keras' ``validation_freq``: every ``freq``-th epoch, or the 1-based epochs listed."""
    if isinstance(freq, int):
        return (epoch + 1) % freq == 0
    return epoch + 1 in freq


# --- evaluation -------------------------------------------------------------------------------------------------


def _local(array) -> jax.Array:
    """This process's copy of a replicated array, on its first device."""
    return jax.device_put(array.addressable_data(0), jax.local_devices()[0])


def _eval_state(model, eval_set, outputs) -> tuple:
    """The model's weights (this process's copies) and its metrics reset, built first as Keras' evaluate builds
    them (a model compiled for the test only, such as the TTA view, has none yet)."""
    x = jax.ShapeDtypeStruct((eval_set.batch_size, *eval_set.images.shape[1:]), jnp.float32)
    y = jax.ShapeDtypeStruct((eval_set.batch_size, eval_set.num_classes), jnp.float32)
    symbolic_build(model, (x, y if len(outputs) == 1 else {o.rstrip("_"): y for o in outputs}))
    model.reset_metrics()
    groups = (model.trainable_variables, model.non_trainable_variables, model.metrics_variables)
    return tuple([_local(v.value) for v in group] for group in groups)


class EvalSteps:
    """``test_step`` over ``count`` batches of ``batch_size`` and then, when given one, over a set's last, short
    batch, on this process's first device: one compiled program per shape, so that a set of up to
    ``EVAL_CHUNK_BATCHES`` batches is scored by one program, its short batch included (one trace of the loop and
    one of the last step, one program to load)."""

    def __init__(self, model, batch_size: int, num_classes: int, outputs: Sequence[str]):
        self.batch_size = batch_size

        def labels(y):
            one_hot = jax.nn.one_hot(y, num_classes)
            return one_hot if len(outputs) == 1 else {o.rstrip("_"): one_hot for o in outputs}

        def scored(state, x, y):
            return model.test_step(state, (float_images(x), labels(y)))  # (logs, state)

        def batches(state, images, targets, count, rest):
            def batch(i):
                return tuple(jax.lax.dynamic_slice_in_dim(a, i * batch_size, batch_size) for a in (images, targets))

            def step(i, state):
                return scored(state, *batch(i))[1]

            # The loop carries the state alone; the last step's logs are the scores (the metrics over every batch
            # so far, as Keras' evaluate reports them): the short batch after the full ones, or the last full one.
            if rest is None:
                count, rest = count - 1, batch(count - 1)
            state = jax.lax.fori_loop(0, count, step, state)
            logs, state = scored(state, *rest)
            return state, logs

        self._run = jax.jit(batches)

    def __call__(self, state, images: np.ndarray, labels: np.ndarray, count: int, rest=None):
        """``rest``: (images, labels) of the short batch scored after the ``count`` full ones, or None."""
        device = jax.local_devices()[0]

        def put(x, y):
            return jax.device_put(x, device), jax.device_put(y.astype(np.int32), device)

        return self._run(state, *put(images, labels), jnp.int32(count), None if rest is None else put(*rest))


def evaluate(model, eval_set, outputs: Sequence[str] = ("",), callbacks=None, programs=None) -> Dict[str, float]:
    """``model.evaluate(..., return_dict=True)`` of this process's ``eval_set`` (``images``, ``labels``,
    ``batch_size``, ``num_classes``), computed here alone; {} for an empty slice. ``programs``: where the compiled
    evaluations are kept (the engine's, so that the final test runs the programs validation compiled; default:
    with the set)."""
    if callbacks is not None:
        callbacks.on_test_begin()
    kept = eval_set.__dict__.setdefault("_compiled", {}) if programs is None else programs
    logs = _scores(model, eval_set, outputs, kept) if len(eval_set.labels) else {}
    if callbacks is not None:
        callbacks.on_test_end(logs)
    return logs


def _scores(model, eval_set, outputs, programs: dict) -> Dict[str, float]:
    images, labels, batch = eval_set.images, eval_set.labels, int(eval_set.batch_size)
    full, tail = divmod(len(labels), batch)
    state, logs = _eval_state(model, eval_set, outputs), None
    chunk = EVAL_CHUNK_BATCHES * batch if full else batch  # (a set shorter than a batch: its tail alone)
    starts = range(0, max(full, 1) * batch, chunk)
    for start in starts:
        end = min(start + chunk, full * batch)
        x, y = _padded(images[start:end], chunk), _padded(labels[start:end], chunk)
        last = bool(tail) and start == starts[-1]  # the short batch in the last chunk's program
        rest = (images[full * batch :], labels[full * batch :]) if last else None
        state, logs = _steps(model, eval_set, batch, outputs, programs)(state, x, y, (end - start) // batch, rest)
    return {name: float(value) for name, value in jax.device_get(logs).items()}


def _steps(model, eval_set, batch: int, outputs, programs: dict) -> EvalSteps:
    """The compiled evaluation of ``model`` on ``batch``-image batches, kept in ``programs`` (every epoch's
    validation and the final test run the same programs: jit keeps one per shape of the short batch, or none;
    the entry keeps the model alive, so its id names no other)."""
    key = (id(model), batch, tuple(outputs), eval_set.num_classes)
    if key not in programs:
        programs[key] = EvalSteps(model, batch, eval_set.num_classes, outputs)
    return programs[key]


def _padded(part: np.ndarray, length: int) -> np.ndarray:
    """``part`` with zero rows up to ``length``: every chunk one shape, one compiled program."""
    if len(part) == length:
        return part
    pad = np.zeros((length - len(part), *part.shape[1:]), part.dtype)
    return np.concatenate([part, pad])
