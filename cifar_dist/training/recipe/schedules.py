"""Per-step learning-rate schedules, as Keras ``LearningRateSchedule`` objects, for either Keras.

The optimizer evaluates the schedule at its own step count at every step, so
the schedule is exact per step whatever ``trainer.steps_per_execution`` is, is
saved in (and restored with) the optimizer's checkpointed ``iterations``, and
needs no callback. Horovod-aware by construction: the trainer passes the lr
already scaled to the world size and the number of *global* steps (each step
consumes one global batch), so the same schedule spans the same data on any
number of ranks.

Each schedule class is written once and defined per Keras by
``schedule_classes(keras)`` (registered with that Keras as ``cifar_dist>Name``;
its maths in ``keras_ops.ops_of(keras)``, so Keras 3's run on any backend);
the module-level ``Triangular`` is Keras 2's.

What the trainer calls::

    build_schedule(lr, schedule_cfg, steps_per_epoch, epochs, keras=None,
                   warmup_epochs=0.0, decay_epochs=(), decay_factor=0.1, size=1)

``lr`` (a float already scaled to the world size) or the schedule to give the
optimizer's factory (``optimizers.py``, same ``keras``). A Keras 2 run passes
no warmup/decay: Horovod's ``LearningRateWarmupCallback`` and
``LearningRateScheduleCallback`` set its lr variable per batch. Keras 3
optimizers have no lr variable those callbacks could set, so a Keras 3 run
passes ``trainer.warmup_epochs``, ``trainer.lr_decay_epochs``,
``trainer.lr_decay_factor`` and the world ``size`` here instead, and gets
``HorovodLr``: the lr those callbacks would have set, per step, at the
optimizer's (global) step count (``horovod_multiplier`` says exactly how).
Two things of the callbacks it does not do: their momentum correction (an
SGD momentum scaled by new/old lr for the one batch where the lr changes:
Keras 3's momentum is a constant) and, with ``trainer.steps_per_execution``
> 1, setting the lr only at the first step of each execution (the schedule
is exact per step).
The lr an optimizer of either Keras applies at its current step is
``keras_ops.current_lr(optimizer)``.
"""

from __future__ import annotations

import math
from types import ModuleType, SimpleNamespace
from typing import Optional, Sequence

from cifar_dist.common.keras_flavor import KERAS2, keras_module
from cifar_dist.common.keras_ops import keras_or_default, ops_of, per_keras, registered


@per_keras
def schedule_classes(keras: ModuleType) -> SimpleNamespace:
    """``Triangular``, ``HorovodLr`` and ``InverseTimeDecayed`` as ``keras.optimizers.schedules`` classes."""
    ops = ops_of(keras)
    base_class = keras.optimizers.schedules.LearningRateSchedule
    serialize, deserialize = keras.optimizers.schedules.serialize, keras.optimizers.schedules.deserialize

    def evaluate(lr, step):
        """A float lr, or a schedule's value at ``step``."""
        return lr(step) if isinstance(lr, base_class) else lr

    def lr_config(lr):
        return serialize(lr) if isinstance(lr, base_class) else float(lr)

    def lr_from_config(value):
        return deserialize(value) if isinstance(value, dict) else float(value)

    @registered(keras)
    class Triangular(base_class):
        """Linear from start_factor x peak to peak at peak_step, then linear to end_factor x peak at total_steps.

        One-cycle (Smith) / airbench's triangle; flat at the end value after total_steps.
        """

        def __init__(
            self,
            peak: float,
            total_steps: int,
            peak_fraction: float = 0.25,
            start_factor: float = 0.2,
            end_factor: float = 0.05,
        ):
            self.peak = float(peak)
            self.total_steps = int(total_steps)
            self.peak_fraction = float(peak_fraction)
            self.start_factor = float(start_factor)
            self.end_factor = float(end_factor)

        def __call__(self, step):
            step = ops.cast(step, "float32")
            total = float(max(self.total_steps, 1))
            peak_step = max(self.peak_fraction * total, 1e-9)
            rising = self.start_factor + (1.0 - self.start_factor) * step / peak_step
            falling = 1.0 + (self.end_factor - 1.0) * ops.minimum(
                (step - peak_step) / max(total - peak_step, 1e-9), 1.0
            )
            return self.peak * ops.where(step < peak_step, rising, falling)

        def get_config(self):
            return {
                "peak": self.peak,
                "total_steps": self.total_steps,
                "peak_fraction": self.peak_fraction,
                "start_factor": self.start_factor,
                "end_factor": self.end_factor,
            }

    @registered(keras)
    class HorovodLr(base_class):
        """``lr`` (a float or a schedule) times ``horovod_multiplier``: the lr Horovod's warmup and step-decay
        callbacks would set at each step, as a schedule (for optimizers without an lr variable: Keras 3's)."""

        def __init__(
            self,
            lr,
            steps_per_epoch: int,
            size: int,
            warmup_epochs: float = 0.0,
            decay_epochs: Sequence[int] = (),
            decay_factor: float = 0.1,
        ):
            self.lr = lr
            self.steps_per_epoch = int(steps_per_epoch)
            self.size = int(size)
            self.warmup_epochs = float(warmup_epochs)
            self.decay_epochs = sorted(int(e) for e in decay_epochs)
            self.decay_factor = float(decay_factor)

        def __call__(self, step):
            multiplier = horovod_multiplier(
                ops, step, self.steps_per_epoch, self.size, self.warmup_epochs, self.decay_epochs, self.decay_factor
            )
            return evaluate(self.lr, step) * multiplier

        def get_config(self):
            return {
                "lr": lr_config(self.lr),
                "steps_per_epoch": self.steps_per_epoch,
                "size": self.size,
                "warmup_epochs": self.warmup_epochs,
                "decay_epochs": list(self.decay_epochs),
                "decay_factor": self.decay_factor,
            }

        @classmethod
        def from_config(cls, config):
            return cls(**{**config, "lr": lr_from_config(config["lr"])})

    @registered(keras)
    class InverseTimeDecayed(base_class):
        """``schedule(step) / (1 + decay * step)``: Keras 2's legacy ``decay`` argument over an lr schedule."""

        def __init__(self, schedule, decay: float):
            self.schedule = schedule
            self.decay = float(decay)

        def __call__(self, step):
            return self.schedule(step) / (1.0 + self.decay * ops.cast(step, "float32"))

        def get_config(self):
            return {"schedule": lr_config(self.schedule), "decay": self.decay}

        @classmethod
        def from_config(cls, config):
            return cls(lr_from_config(config["schedule"]), config["decay"])

    return SimpleNamespace(Triangular=Triangular, HorovodLr=HorovodLr, InverseTimeDecayed=InverseTimeDecayed)


def __getattr__(name: str):
    """``Triangular``: Keras 2's (saved Keras 2 checkpoints name it), defined on first use, so that importing this
    module for a Keras 3 model on JAX needs no TensorFlow."""
    if name == "Triangular":
        return schedule_classes(keras_module(KERAS2)).Triangular
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def horovod_multiplier(
    ops, step, steps_per_epoch: int, size: int, warmup_epochs: float, decay_epochs: Sequence[int], decay_factor: float
):
    """The factor of the initial lr that Horovod 0.28.1's Keras callbacks, as the trainer configures them, leave
    in the lr variable during global step ``step`` (horovod/_keras/callbacks.py), epoch e = step // steps_per_epoch,
    batch b = step % steps_per_epoch:

    - ``LearningRateWarmupCallback(warmup_epochs)``, at every batch of epochs e < warmup_epochs:
      1/size * ((e + b/spe + 1/spe) * (size - 1) / warmup_epochs + 1);
    - ``LearningRateScheduleCallback(multiplier=lambda epoch: decay_factor ** (i + 1), start_epoch=d_i,
      end_epoch=d_(i+1))`` for the i-th of the sorted ``decay_epochs``, at batch 0 of epochs d_i <= e < d_(i+1):
      decay_factor ** (i + 1), a step decay (trainer.horovod_lr_callbacks);
    - the warmup callback runs first, so a decay wins at batch 0 and the warmup at the others; where neither
      runs the variable keeps the last value set: the warmup's last (its final batch), else 1.
    """
    e = ops.cast(ops.cast(step, "int32") // steps_per_epoch, "float32")
    b = ops.cast(ops.cast(step, "int32") % steps_per_epoch, "float32")
    multiplier, decaying = _held_multiplier(steps_per_epoch, size, warmup_epochs), None
    for i, start in enumerate(decay_epochs):
        active = e >= start
        if i + 1 < len(decay_epochs):
            active = active & (e < decay_epochs[i + 1])
        multiplier = ops.where(active, ops.cast(decay_factor ** (i + 1), "float32"), multiplier)
        decaying = active if decaying is None else decaying | active
    if warmup_epochs > 0:
        warm = 1.0 / size * ((e + b / steps_per_epoch + 1.0 / steps_per_epoch) * (size - 1) / warmup_epochs + 1.0)
        warming = e < warmup_epochs
        if decaying is not None:
            warming = warming & ~((b == 0) & decaying)
        multiplier = ops.where(warming, warm, multiplier)
    return multiplier


def _held_multiplier(steps_per_epoch: int, size: int, warmup_epochs: float) -> float:
    """The factor the lr variable keeps after the warmup's last batch (1 without a warmup)."""
    if warmup_epochs <= 0:
        return 1.0
    last = math.ceil(warmup_epochs) - 1 + (steps_per_epoch - 1) / steps_per_epoch
    return 1.0 / size * ((last + 1.0 / steps_per_epoch) * (size - 1) / warmup_epochs + 1.0)


def build_schedule(
    lr: float,
    schedule_cfg,
    steps_per_epoch: int,
    epochs: int,
    keras: Optional[ModuleType] = None,
    warmup_epochs: float = 0.0,
    decay_epochs: Sequence[int] = (),
    decay_factor: float = 0.1,
    size: int = 1,
):
    """``lr`` (already scaled to the world size) or, for ``kind=triangular``, a Triangular over every step of the
    run; wrapped in ``HorovodLr`` when a warmup or step decay is given (Keras 3 runs: module docstring)."""
    classes = schedule_classes(keras_or_default(keras))
    if schedule_cfg.kind.value != "none":
        lr = classes.Triangular(
            lr, steps_per_epoch * epochs, schedule_cfg.peak_fraction, schedule_cfg.start_factor, schedule_cfg.end_factor
        )
    if warmup_epochs > 0 or decay_epochs:
        lr = classes.HorovodLr(lr, steps_per_epoch, size, warmup_epochs, decay_epochs, decay_factor)
    return lr
