"""The in-process launcher: train in this very process (the job's one process, or one rank of a job
some outer launcher started: a user's own mpirun, a Slurm step, a rank of launcher=mpirun)."""

from __future__ import annotations

from dataclasses import dataclass

from cifar_dist.config.options import config_option
from cifar_dist.launchers.base import JobSpec, Launcher, LaunchResult


@config_option("launcher", "local")
@dataclass
class LocalLauncherConf:
    """``launcher=local`` (the default): train in this process (a job of one process)."""

    _target_: str = "cifar_dist.launchers.local.LocalLauncher"


class LocalLauncher(Launcher):
    runs_in_this_process = True

    def launch(self, job: JobSpec) -> LaunchResult:
        # The task (train, evaluate) is a function named by the config; it is
        # imported only now because it pulls in TensorFlow and Horovod.
        from hydra.utils import get_method

        task = get_method(job.cfg.task._target_)
        metrics = task(job.cfg, job.output_dir)
        return LaunchResult(exit_code=0, metrics=metrics)
