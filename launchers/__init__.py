"""Launchers: how a composed job gets run: in-process (local), under mpirun or Horovod's Gloo
(gloo) on one or several hosts, as a Slurm job (slurm/), an Azure ML job (azureml/), or a job on
the retired Azure Batch AI (batchai/; Microsoft retired it in 2019, Azure ML is its successor).

A launcher is one module: its class (``launch(job)``, and ``launch_all(jobs)``
for the points of a sweep) and its config dataclass marked
``@config_option("launcher", "<name>")`` (``cifar_dist/config/options.py``), which
*is* the option ``launcher=<name>`` and which the class receives as is. The
module is ``launchers/<name>.py``, or ``launchers/<name>/config.py`` for a
launcher that is a package; ``register_built_in`` finds it (no list to edit),
and everything that names the launchers (``--help``, the checks of a command
line, the tests of the docs) reads them from Hydra's ConfigStore, where the
module stored its option. What a launcher is (its dry run writes a job or a
command, the folders it writes into a run dir) its class says
(``base.Launcher``), asked through the ``_target_`` of its option.
See ``base.py`` for the interface and docs/launchers.md, "Write your own launcher".

The folders import one way (``tests/project/test_structure.py``): the modules
here (the interface, ``base.py`` and ``cluster_base.py``; the launchers of one
module; ``multirank.py``, what mpirun and gloo share) import ``ranks/`` (what
runs beside every rank, whoever starts it: its wrapper, environment, heartbeat,
hosts, failure report, the runner's supervisor), which imports no launcher; the
cluster launchers (``slurm/``, ``azureml/``, ``batchai/``) and ``azure/`` (what
Azure ML and Batch AI share) import the modules here, and ``ranks/`` where their
ranks need it; nothing here imports them.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from typing import Iterator

__all__ = ["JobSpec", "LaunchError", "LaunchResult", "Launcher", "register_built_in"]
# The interface, handed on from base.py when first asked for (PEP 562): importing any module of the package runs
# this file first, and each rank's wrapper (ranks/rank_exec.py) must not load Hydra and the config for it.
_INTERFACE = ("JobSpec", "LaunchError", "LaunchResult", "Launcher")


def __getattr__(name: str):
    if name in _INTERFACE:
        from cifar_dist.launchers import base  # lazy: Hydra, the config (see _INTERFACE)

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def option_modules() -> Iterator[str]:
    """Every module that may define a launcher option: ``launchers/<name>.py`` and
    ``launchers/<name>/config.py``. They keep their heavy imports (MPI, Azure SDKs)
    inside functions, so importing them all is cheap."""
    for module in pkgutil.iter_modules(__path__):
        name = f"{__name__}.{module.name}"
        if module.ispkg:
            name += ".config"
            if importlib.util.find_spec(name) is None:
                continue
        yield name


def register_built_in() -> None:
    """Import every launcher module; each stores its own option in Hydra's ConfigStore."""
    from cifar_dist.config.options import store_options  # lazy: Hydra's ConfigStore (see _INTERFACE)

    for name in option_modules():
        store_options(importlib.import_module(name))
