"""One home per config option: the dataclass *is* the option.

``@config_option("launcher", "mpirun")`` above a ``@dataclass`` stores it in
Hydra's ConfigStore as the group option ``launcher=mpirun`` (as Hydra's
submitit plugin stores its launcher config from its own module): the fields
are the schema (a misspelt key or a wrong type fails at start-up) and their
defaults are the values. No YAML file repeats them; YAML in ``conf/`` is for
presets that combine options (``experiment/``, ``debug/``) and for options
without a schema (a user's own ``model/<name>.yaml`` under ``--config-dir``).

The built-in options are stored by ``cifar_dist.all_options.register_configs``:
those of ``cifar_dist.config.schema`` (model, optimizer, trainer, engine, task,
tracking), of ``cifar_dist.config.data_options`` (data), and of every launcher
module (``launchers.register_built_in``, found by pkgutil).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Optional, TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

T = TypeVar("T")

OPTION_ATTR = "__config_option__"


def config_option(group: str, name: str, package: Optional[str] = None) -> Callable[[T], T]:
    """Class decorator: store the dataclass as the option ``group=name`` (``package``: where it
    lands, e.g. ``_global_`` for an option that sets several groups at once)."""

    def store(node: T) -> T:
        setattr(node, OPTION_ATTR, (group, name, package))
        _store(node)
        return node

    return store


def _store(node: type) -> None:
    group, name, package = node.__dict__[OPTION_ATTR]
    stored: Any = node
    if package == "_global_":
        # Merged into the root config (typed by another dataclass): each field its own typed node.
        typed = OmegaConf.structured(node)
        stored = {key: typed[key] for key in typed}
    provider = node.__module__.split(".")[0]  # who defined it: cifar_dist, or a user's own module
    ConfigStore.instance().store(group=group, name=name, node=stored, package=package, provider=provider)


def store_options(module: ModuleType) -> None:
    """Store (again) every option defined in ``module``: idempotent, so that the options are
    back even when something restored Hydra's ConfigStore after the module was imported."""
    for value in vars(module).values():
        if isinstance(value, type) and OPTION_ATTR in value.__dict__ and value.__module__ == module.__name__:
            _store(value)
