"""A run dir's ``.hydra/*.yaml``: without secrets as soon as Hydra writes them, and read back checked.

Written (a Hydra callback): the run dir's ``.hydra/*.yaml`` (and a sweep's ``multirun.yaml``) without secrets.

Hydra saves the composed config, its own config and the overrides as the
user typed them, so ``tracking.uri=http://alice:PW@host/`` or
``+launcher.env.MY_TOKEN=...`` would stay in plain text in files that are
copied, shared and uploaded with the run. Hydra writes them just before
``on_job_start``; this callback rewrites them there, masked by the one home of
redaction (``cifar_dist/common/redaction.py``), before the task runs or anything is
handed on. The credentials themselves still reach the job the way the user
gave them (MLflow's variables, the launcher's environment), never through
these files; the resume checks compare the masked forms (``resume_policy``).

Read (``load_saved``): a run dir arrives from elsewhere (a download, a colleague's copy) and its saved
``config.yaml`` may have been edited or damaged. What cifar_dist reads of it (the engine that trained, the data it
trained on: a resume, engine=auto keeping the checkpoints' engine, an evaluation) is checked against its schema
when it is loaded, and a key no schema has or a value of the wrong type is one line naming the file and the key
(was: OmegaConf's 22-line ``ConfigKeyError`` traceback, or a run-dir guard that Hydra let fail open).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.atomic_files import atomic_write_text
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.hydra_hooks import fails_closed
from cifar_dist.common.redaction import redact_yaml
from cifar_dist.config.schema import engine_of, typed_data

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

    @fails_closed
    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        for path in saved_files(config):
            redact_yaml_file(path)


class SavedConfigError(CifarDistError):
    """A run dir's saved config is not as cifar_dist wrote it; the message names the file and the key."""


# The nodes of a saved config that cifar_dist reads back, each typed by its schema as it is read.
READ_BACK = {"engine": engine_of, "data": lambda saved: typed_data(saved.get("data") or {})}


def load_saved(path: Path) -> DictConfig:
    """``path``, a run dir's saved ``.hydra/config.yaml``, loaded with the nodes cifar_dist reads of it
    (``READ_BACK``) checked against their schemas; one line naming the file and the key where they do not fit."""
    fix = "the file was edited or damaged: put that back as cifar_dist wrote it (or remove it)"
    try:
        saved = OmegaConf.load(path)
    except Exception as exc:  # noqa: BLE001 -- a YAML or I/O error, named in one line
        raise SavedConfigError(f"cannot read {path} ({type(exc).__name__}); {fix}") from None
    if not isinstance(saved, DictConfig):
        raise SavedConfigError(f"{path} is not a config (a YAML mapping); {fix}")
    for node, read in READ_BACK.items():
        try:
            read(saved)
        except Exception as exc:  # noqa: BLE001 -- OmegaConf's key and type errors, a node of the wrong kind
            key = getattr(exc, "full_key", None)
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SavedConfigError(f"{path}: {node}{'.' + key if key else ''}: {detail}; {fix}") from None
    return saved
