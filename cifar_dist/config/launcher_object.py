"""The configured launcher, built once in the process that launches the job.

Validation asks it for its bad settings, the engine choice how many processes it
starts, the app (or the sweep launcher) to run the job: all the same object,
built from ``cfg.launcher`` (its ``_target_`` and fields) on the first call.
Hydra hands each step its own copy of the config, so the object is found again by
the launcher node's values; a sweep's points with equal launcher settings share
one. The core builds it by its ``_target_``, never importing a launcher.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Optional

import hydra.utils
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.process_role import in_child_process


def launcher_key(launcher: DictConfig) -> str:
    """The launcher node's values, resolved, as one string: equal settings, equal key."""
    return json.dumps(OmegaConf.to_container(launcher, resolve=True), sort_keys=True, default=str)


def configured_launcher(cfg: DictConfig) -> Any:
    """The launcher ``cfg.launcher`` configures, built on the first call for these settings and the same object
    after; raises what Hydra's ``instantiate`` raises (then nothing is kept, and the next call tries again)."""
    return _launcher_for(launcher_key(cfg.launcher))


def launcher_class(target: Any) -> Optional[type]:
    """The class a launcher node's ``_target_`` names, to ask what that launcher is (``Launcher.dry_run_writes``,
    ``run_dir_folders``, ``follows_job_in``) without building it; None without a target or when it cannot be
    imported (a bad ``_target_`` is reported where the launcher is built)."""
    if not target:
        return None
    try:
        return get_class(str(target))
    except Exception:  # noqa: BLE001 - see above
        return None


def launching_launcher(cfg: DictConfig) -> Any:
    """``configured_launcher(cfg)`` in the process that launches the job; None inside a rank (its launcher
    has done its part), without a launcher node, or when it cannot be built (it says why when the job starts)."""
    if in_child_process() or not isinstance(cfg.get("launcher"), DictConfig):
        return None
    try:
        return configured_launcher(cfg)
    except Exception:  # noqa: BLE001 - a launcher that cannot be built says why when the job starts
        return None


@cache
def _launcher_for(key: str) -> Any:
    """One launcher per distinct settings (``launcher_key``), built from them: functools keeps it, not a dict of
    this module's; a call that raises keeps nothing."""
    return hydra.utils.instantiate(OmegaConf.create(json.loads(key)), _convert_="all")
