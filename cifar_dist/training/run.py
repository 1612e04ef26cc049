"""A training run's state: what every step of the trainer (and its parts beside it) needs.

``trainer.start_run`` makes it; ``model_setup.py``, ``run_records.py`` and
the trainer's steps read it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cifar_dist.common.keras_flavor import keras_module
from cifar_dist.common.results import METRICS_FILE


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
