"""Checks on values that the config's types alone cannot express.

Run in the launching process before anything starts (and again in each rank,
which costs nothing), so that a zero batch size fails in a second, not after
mpirun has started N processes or a cluster has been resized.
"""
from __future__ import annotations

from typing import List

from omegaconf import DictConfig

from cifar_dist.errors import CifarDistError


class ConfigError(CifarDistError, ValueError):
    """Bad config values; the message is one line listing every problem."""


def problems(cfg: DictConfig) -> List[str]:
    found = []
    t = cfg.trainer
    if t.epochs < 1:
        found.append(f"trainer.epochs={t.epochs} must be >= 1")
    if t.batch_size < 1:
        found.append(f"trainer.batch_size={t.batch_size} must be >= 1")
    if t.warmup_epochs < 0:
        found.append(f"trainer.warmup_epochs={t.warmup_epochs} must be >= 0")
    if str(t.resume).lower() not in ("auto", "true", "false"):
        found.append(f"trainer.resume={t.resume} must be auto, true or false")
    if t.keep_checkpoints < 0:
        found.append(f"trainer.keep_checkpoints={t.keep_checkpoints} must be >= 0 (0 keeps all)")
    if t.max_epochs_per_run < 0:
        found.append(f"trainer.max_epochs_per_run={t.max_epochs_per_run} must be >= 0 (0 = no limit)")
    if t.steps_per_execution < 1:
        found.append(f"trainer.steps_per_execution={t.steps_per_execution} must be >= 1 (1 = one step per call)")
    if t.intra_op_threads < 0 or t.inter_op_threads < 0:
        found.append("trainer.intra_op_threads/inter_op_threads must be >= 0 (0 = automatic)")
    if not cfg.optimizer.lr > 0:
        found.append(f"optimizer.lr={cfg.optimizer.lr} must be > 0")
    if not 0 < t.lr_decay_factor:
        found.append(f"trainer.lr_decay_factor={t.lr_decay_factor} must be > 0")
    if not 0 <= t.label_smoothing < 1:
        found.append(f"trainer.label_smoothing={t.label_smoothing} must be in [0, 1)")
    sched = t.lr_schedule
    if not 0 < sched.peak_fraction < 1:
        found.append(f"trainer.lr_schedule.peak_fraction={sched.peak_fraction} must be in (0, 1)")
    if sched.start_factor < 0 or sched.end_factor < 0:
        found.append("trainer.lr_schedule.start_factor/end_factor must be >= 0 (fractions of the peak lr)")
    if sched.kind != "none" and (t.warmup_epochs > 0 or t.lr_decay_epochs):
        found.append("trainer.lr_schedule sets the lr at every step; drop trainer.warmup_epochs/lr_decay_epochs "
                     "(its start_factor is the warmup)")
    a = cfg.data.augment
    for key in ("translate", "cutout"):
        if a[key] < 0:
            found.append(f"data.augment.{key}={a[key]} must be >= 0 pixels (0 = off)")
    for key in ("width_shift", "height_shift"):
        if not 0 <= a[key] < 1:
            found.append(f"data.augment.{key}={a[key]} must be in [0, 1) (a fraction of the image size)")
    return found


def validate(cfg: DictConfig) -> None:
    found = problems(cfg)
    if found:
        raise ConfigError("bad config: " + "; ".join(found))
