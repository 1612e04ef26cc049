"""The in-process launcher: train in this very process (one Horovod rank, or
one rank of a world some outer launcher started)."""
from __future__ import annotations

from dataclasses import dataclass

from cifar_dist.launchers.base import JobSpec, LaunchResult, Launcher


@dataclass
class LocalLauncherConf:
    _target_: str = "cifar_dist.launchers.local.LocalLauncher"


class LocalLauncher(Launcher):
    def launch(self, job: JobSpec) -> LaunchResult:
        # Imported here: the trainer pulls in TensorFlow and Horovod.
        from cifar_dist.training.trainer import train

        metrics = train(job.cfg, job.output_dir)
        return LaunchResult(exit_code=0, metrics=metrics)
