"""A launcher defined outside cifar_dist, the one documented way (docs/launchers.md,
"Write your own launcher"): a dataclass marked ``@config_option("launcher", ...)``
and its class, nothing else. tests/config/test_config_options.py checks that importing
this module makes ``launcher=echo`` compose, typed, appear in ``--help`` and run."""

from __future__ import annotations

import json
from dataclasses import dataclass

from cifar_dist.config.options import config_option
from cifar_dist.launchers.base import JobSpec, Launcher, LaunchResult


@config_option("launcher", "echo")
@dataclass
class EchoLauncherConf:
    _target_: str = "own_launcher.EchoLauncher"
    note: str = "hello"


class EchoLauncher(Launcher):
    """Runs nothing: writes what it was given into the run dir as echo.json."""

    def __init__(self, **fields):
        self.conf = EchoLauncherConf(**fields)

    def launch(self, job: JobSpec) -> LaunchResult:
        record = {"note": self.conf.note, "overrides": job.task_overrides}
        (job.output_dir / "echo.json").write_text(json.dumps(record))
        return LaunchResult(exit_code=0)
