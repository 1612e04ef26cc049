"""A secret in ``launcher.env`` on the real Slurm (tests/helpers/slurm_cluster.py; issue 47, item 5): the batch
script (a file, mode 644) does not hold it, and the job's ranks still get it, from sbatch's environment.

The ranks' interpreter is a stand-in that records the environment a rank starts with and exits: what is checked is
the way the value travels, not training (the other Slurm tests train)."""

import stat
import sys

import pytest

from helpers.cli import run_cli
from helpers.slurm_jobs import REAL_SLURM, env_for, job_id, small

pytestmark = [*REAL_SLURM, pytest.mark.xdist_group("slurm_secret_env")]

TOKEN = "Slurm-Tok3n-value"

# Every start of the job's interpreter but a rank's (the run dir's lock holder, ...) is the real one's.
RECORDING_PYTHON = """#!/bin/sh
if [ "$2" = cifar_dist.launchers.ranks.rank_exec ]; then
    env > {record}
    exit 0
fi
exec {python} "$@"
"""


@pytest.mark.timeout(600)
def test_a_secret_in_launcher_env_reaches_the_slurm_job_but_not_its_script(cluster, tiny_data, tmp_path):
    record = tmp_path / "rank_env.txt"
    python = tmp_path / "python"
    python.write_text(RECORDING_PYTHON.format(record=record, python=sys.executable))
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    run_dir = tmp_path / "run"
    proc = run_cli(
        *small(tiny_data, f"+launcher.env.MY_TOKEN={TOKEN}", "+launcher.env.NCCL_DEBUG=INFO"),
        f"launcher.python={python}",
        f"hydra.run.dir={run_dir}",
        env=env_for(cluster),
        timeout=300,
    )
    assert job_id(run_dir), proc.stdout[-3000:] + proc.stderr[-3000:]
    rank_env = dict(line.split("=", 1) for line in record.read_text().splitlines() if "=" in line)
    assert rank_env.get("MY_TOKEN") == TOKEN and rank_env.get("NCCL_DEBUG") == "INFO"  # usable where it was sent
    script = (run_dir / "slurm" / "job.sbatch").read_text()
    assert "export NCCL_DEBUG=INFO" in script and "export MY_TOKEN before submitting it by hand" in script
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(errors="replace"), path
    assert TOKEN not in proc.stdout + proc.stderr
