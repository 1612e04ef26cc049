"""Hydra callback: the run dir's ``.hydra/*.yaml`` (and a sweep's ``multirun.yaml``) without secrets.

Hydra saves the composed config, its own config and the overrides as the
user typed them, so ``tracking.uri=http://alice:PW@host/`` or
``+launcher.env.MY_TOKEN=...`` would stay in plain text in files that are
copied, shared and uploaded with the run. Hydra writes them just before
``on_job_start``; this callback rewrites them there, masked by the one home of
redaction (``cifar_dist/common/redaction.py``), before the task runs or anything is
handed on. The credentials themselves still reach the job the way the user
gave them (MLflow's variables, the launcher's environment), never through
these files; the resume checks compare the masked forms (``resume_policy``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from cifar_dist.common.atomic_files import atomic_write_text
from cifar_dist.common.redaction import redact_yaml

SAVED_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")


def redact_yaml_file(path: Path) -> None:
    """``path`` (a YAML file Hydra saved) rewritten with its secrets masked; left alone when nothing changes."""
    if not path.is_file():
        return
    text = path.read_text("utf-8")
    clean = redact_yaml(text)
    if clean != text:
        atomic_write_text(path, clean)


def saved_files(config: Any) -> Iterable[Path]:
    """The YAML files Hydra wrote for this job: ``<output_dir>/<output_subdir>/*.yaml`` and, in a sweep,
    ``<sweep dir>/multirun.yaml``."""
    runtime_dir = OmegaConf.select(config, "hydra.runtime.output_dir", default=None)
    subdir = OmegaConf.select(config, "hydra.output_subdir", default=None)
    if runtime_dir and subdir:
        yield from (Path(str(runtime_dir)) / str(subdir) / name for name in SAVED_FILES)
    sweep_dir = OmegaConf.select(config, "hydra.sweep.dir", default=None, throw_on_resolution_failure=False)
    if sweep_dir and str(OmegaConf.select(config, "hydra.mode", default="")).endswith("MULTIRUN"):
        yield Path(str(sweep_dir)) / "multirun.yaml"


class RedactSavedConfig(Callback):
    """Masks the secrets of the files Hydra saved for the job (see the module doc)."""

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        for path in saved_files(config):
            redact_yaml_file(path)
