"""Launchers: how a composed job gets run (in-process, under mpirun, on Batch AI).

A launcher is one class with a ``launch(job) -> LaunchResult`` method plus one
YAML file in ``conf/launcher/`` whose ``_target_`` names the class; see
``base.py`` for the interface and README "Writing your own launcher".
"""
from __future__ import annotations

from typing import Dict

from cifar_dist.launchers.base import JobSpec, LaunchError, LaunchResult, Launcher

__all__ = ["JobSpec", "LaunchError", "LaunchResult", "Launcher", "registered_launcher_schemas"]


def registered_launcher_schemas() -> Dict[str, type]:
    """Schemas (dataclasses) of the built-in launchers, by config name.

    The modules named here keep their heavy imports (MPI, Azure SDKs) inside
    ``launch()``, so importing them to read the schema is cheap.
    """
    from cifar_dist.launchers.local import LocalLauncherConf

    schemas: Dict[str, type] = {"local": LocalLauncherConf}
    from cifar_dist.launchers.batchai.config import BatchAILauncherConf; schemas["batchai"] = BatchAILauncherConf
    from cifar_dist.launchers.azureml.config import AzureMLLauncherConf; schemas["azureml"] = AzureMLLauncherConf
    from cifar_dist.launchers.gloo import GlooLauncherConf; from cifar_dist.launchers.mpirun import MpirunLauncherConf; schemas.update(mpirun=MpirunLauncherConf, gloo=GlooLauncherConf)
    return schemas
