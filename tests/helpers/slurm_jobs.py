"""The tests' jobs on the real single-node Slurm (helpers/slurm_cluster.py): the marks that skip them where Slurm is
not installed, a small run on a small copy of the sample, the CLI's environment for the cluster, a job's id, state."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from helpers.cli import cli_env, tiny_cifar
from helpers.slurm_cluster import missing_packages

# The marks of every test on the real Slurm: each module's ``pytestmark = REAL_SLURM``.
REAL_SLURM = [
    pytest.mark.mpi,
    pytest.mark.horovod,
    pytest.mark.skipif(
        bool(missing_packages()),
        reason=f"Slurm is not installed ({', '.join(missing_packages())} "
        "missing): run scripts/install.sh as root, or apt-get install slurmctld slurmd slurm-client munge",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the test cluster runs slurmd as root (SlurmUser=root): run as root"),
]

SMALL = (
    "trainer.batch_size=32",
    "trainer.epoch_policy=shard",
    "trainer.plot=false",
    "trainer.tensorboard=false",
    "trainer.verbose=2",
    "model.dense_units=64",
    "launcher=slurm",
    "launcher.poll_interval_s=1",
)


def small(tiny_data: Path, *more: str):
    return (*tiny_cifar(tiny_data), *SMALL, *more)


def env_for(cluster) -> dict:
    return cli_env(SLURM_CONF=cluster.env["SLURM_CONF"], TF_CPP_MIN_LOG_LEVEL="2")


def job_id(run_dir: Path) -> str:
    path = run_dir / "slurm" / "job_id"
    return path.read_text().strip() if path.exists() else ""


def job_state(cluster, jid: str) -> str:
    out = cluster.run("scontrol", "-o", "show", "job", jid, check=False).stdout
    match = re.search(r"JobState=(\S+)", out)
    return match.group(1) if match else ""
