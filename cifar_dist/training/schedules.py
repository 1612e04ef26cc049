"""Per-step learning-rate schedules, as Keras ``LearningRateSchedule`` objects.

The optimizer evaluates the schedule at its own step count at every step, so
the schedule is exact per step whatever ``trainer.steps_per_execution`` is, is
saved in (and restored with) the optimizer's checkpointed ``iterations``, and
needs no callback. Horovod-aware by construction: the trainer passes the lr
already scaled to the world size and the number of *global* steps (each step
consumes one global batch), so the same schedule spans the same data on any
number of ranks.
"""
from __future__ import annotations

import tensorflow as tf


@tf.keras.utils.register_keras_serializable("cifar_dist")
class Triangular(tf.keras.optimizers.schedules.LearningRateSchedule):
    """Linear from start_factor x peak to peak at peak_step, then linear to end_factor x peak at total_steps.

    One-cycle (Smith) / airbench's triangle; flat at the end value after total_steps.
    """

    def __init__(self, peak: float, total_steps: int, peak_fraction: float = 0.25,
                 start_factor: float = 0.2, end_factor: float = 0.05):
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.peak_fraction = float(peak_fraction)
        self.start_factor = float(start_factor)
        self.end_factor = float(end_factor)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        total = float(max(self.total_steps, 1))
        peak_step = max(self.peak_fraction * total, 1e-9)
        rising = self.start_factor + (1.0 - self.start_factor) * step / peak_step
        falling = 1.0 + (self.end_factor - 1.0) * tf.minimum((step - peak_step) / max(total - peak_step, 1e-9), 1.0)
        return self.peak * tf.where(step < peak_step, rising, falling)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps, "peak_fraction": self.peak_fraction,
                "start_factor": self.start_factor, "end_factor": self.end_factor}


def build_schedule(lr: float, schedule_cfg, steps_per_epoch: int, epochs: int):
    """``lr`` (already scaled to the world size) or, for ``kind=triangular``, a Triangular over every step of the run."""
    if schedule_cfg.kind.value == "none":
        return lr
    return Triangular(lr, steps_per_epoch * epochs, schedule_cfg.peak_fraction,
                      schedule_cfg.start_factor, schedule_cfg.end_factor)


def current_lr(optimizer) -> float:
    """The lr the optimizer applies at its current step (a schedule is evaluated there)."""
    lr = optimizer.lr
    if isinstance(lr, tf.keras.optimizers.schedules.LearningRateSchedule):
        lr = lr(optimizer.iterations)
    return float(tf.keras.backend.get_value(lr))
