"""Launchers: how a composed job gets run: in-process (local), under mpirun or Horovod's Gloo
(gloo) on one or several hosts, as a Slurm job (slurm/), an Azure ML job (azureml/), or a job on
the retired Azure Batch AI (batchai/; Microsoft retired it in 2019, Azure ML is its successor).

A launcher is one module: its class (``launch(job)``, and ``launch_all(jobs)``
for the points of a sweep) and its config dataclass, which the module
registers in Hydra's ConfigStore as ``launcher/<name>_schema`` and the class
receives as is; plus one YAML file in ``conf/launcher/`` that uses the schema.
See ``base.py`` for the interface and docs/launchers.md, "Write your own launcher".
"""
from __future__ import annotations

import importlib

from cifar_dist.launchers.base import JobSpec, LaunchError, LaunchResult, Launcher

__all__ = ["JobSpec", "LaunchError", "LaunchResult", "Launcher", "BUILT_IN", "register_built_in"]

# Modules that register a launcher schema when imported. They keep their heavy
# imports (MPI, Azure SDKs) inside their methods, so importing them is cheap.
BUILT_IN = ("local", "mpirun", "gloo", "batchai.config", "slurm.config", "azureml.config")


def register_built_in() -> None:
    """Import every built-in launcher module, which stores its schema in the ConfigStore."""
    for name in BUILT_IN:
        importlib.import_module(f"{__name__}.{name}")
