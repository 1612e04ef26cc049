"""A launcher for sweep-launcher tests: records each launch_all call and fakes results from the config."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import List, Sequence

from cifar_dist.common.results import METRICS_FILE
from cifar_dist.launchers.base import JobSpec, Launcher, LaunchResult

# A machine that dies mid-sweep: the point of this job number never returns (it writes <its dir>/hanging and sleeps
# until the test kills the sweep, or writes <its dir>/release: a slow point). An environment variable, so that the
# re-run is the same command.
HANG_AT_JOB = "SWEEP_FAKES_HANG_AT_JOB"


def fake_sweep_env(**extra: str) -> dict:
    """The CLI's environment, with tests/ on the path (for this module's launcher)."""
    from helpers.cli import cli_env

    tests = str(Path(__file__).resolve().parents[1])
    return cli_env(PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), tests])), **extra)


class RecordingLauncher(Launcher):
    """Every point: test accuracy = 10 x its lr; lr >= 0.5 fails; the job numbered $SWEEP_FAKES_HANG_AT_JOB hangs.
    Each launch_all call is appended to <sweep dir>/launch_all.jsonl as the job numbers it received."""

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
        if os.environ.get(HANG_AT_JOB) == str(job.job_num):
            (job.output_dir / "hanging").touch()
            deadline = time.time() + 3600
            while not (job.output_dir / "release").exists() and time.time() < deadline:
                time.sleep(0.1)
        lr = float(job.cfg.optimizer.lr)
        if lr >= 0.5:
            return LaunchResult(exit_code=3, message=f"lr {lr} too high")
        (job.output_dir / METRICS_FILE).write_text(
            json.dumps({"test": {"accuracy": lr * 10, "loss": 1.0}, "complete": True, "epochs": []})
        )
        return LaunchResult(exit_code=0)
