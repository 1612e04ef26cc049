"""The in-process launcher: train in this very process (one Horovod rank, or
one rank of a world some outer launcher started)."""
from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from cifar_dist.launchers.base import JobSpec, LaunchResult, Launcher


@dataclass
class LocalLauncherConf:
    _target_: str = "cifar_dist.launchers.local.LocalLauncher"


ConfigStore.instance().store(group="launcher", name="local_schema", node=LocalLauncherConf)


class LocalLauncher(Launcher):
    def launch(self, job: JobSpec) -> LaunchResult:
        # The task (train, evaluate) is a function named by the config; it is
        # imported only now because it pulls in TensorFlow and Horovod.
        from hydra.utils import get_method

        task = get_method(job.cfg.task._target_)
        metrics = task(job.cfg, job.output_dir)
        return LaunchResult(exit_code=0, metrics=metrics)
