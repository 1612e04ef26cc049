"""A launcher for sweep-launcher tests: records each launch_all call and fakes results from the config."""

from __future__ import annotations

import json
from typing import List, Sequence

from cifar_dist.common.results import METRICS_FILE
from cifar_dist.launchers.base import JobSpec, Launcher, LaunchResult


class RecordingLauncher(Launcher):
    """Every point: test accuracy = 10 x its lr; lr >= 0.5 fails. Each launch_all call is
    appended to <sweep dir>/launch_all.jsonl as the job numbers it received."""

    def __init__(self, **fields):
        self.fields = fields

    def launch(self, job: JobSpec) -> LaunchResult:
        return self.launch_all([job])[0]

    def launch_all(self, jobs: Sequence[JobSpec]) -> List[LaunchResult]:
        sweep_dir = jobs[0].output_dir.parent
        with open(sweep_dir / "launch_all.jsonl", "a") as f:
            f.write(
                json.dumps(
                    {
                        "jobs": [j.job_num for j in jobs],
                        "prepared": [(j.output_dir / ".hydra" / "config.yaml").is_file() for j in jobs],
                    }
                )
                + "\n"
            )
        return [self._one(job) for job in jobs]

    @staticmethod
    def _one(job: JobSpec) -> LaunchResult:
        lr = float(job.cfg.optimizer.lr)
        if lr >= 0.5:
            return LaunchResult(exit_code=3, message=f"lr {lr} too high")
        (job.output_dir / METRICS_FILE).write_text(
            json.dumps({"test": {"accuracy": lr * 10, "loss": 1.0}, "complete": True, "epochs": []})
        )
        return LaunchResult(exit_code=0)
