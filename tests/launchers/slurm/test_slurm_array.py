"""A sweep on the real Slurm is one job array, followed with one squeue per poll round, in a sweep
dir and under a job name holding spaces, quotes, ``$`` and ``%`` (tests/helpers/slurm_cluster.py); its points run
side by side (``launcher.concurrent=2``), each with its own result."""

import csv
import json
import os
import re
import shutil
import stat
import time
from pathlib import Path

from cifar_dist.config.override_syntax import quote_override_value
from helpers.cli import assert_ok, read_metrics, run_cli
from helpers.slurm_jobs import REAL_SLURM, env_for, job_id, small

pytestmark = REAL_SLURM

RECORDED = ("sbatch", "squeue", "scontrol")


def recording_path(tmp_path: Path) -> tuple:
    """A PATH folder whose sbatch/squeue/scontrol log each call (time, argv) and exec the real client."""
    shims, log = tmp_path / "shims", tmp_path / "slurm-calls.log"
    shims.mkdir()
    for name in RECORDED:
        real = shutil.which(name)
        shim = shims / name
        shim.write_text(f'#!/bin/sh\necho "$(date +%s.%N) {name} $*" >> {quote_sh(log)}\nexec {quote_sh(real)} "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    return shims, log


def quote_sh(path) -> str:
    import shlex

    return shlex.quote(str(path))


def calls(log: Path, name: str) -> list:
    """(time, argv text) of each recorded call of ``name``."""
    out = []
    for line in log.read_text().splitlines():
        stamp, called, *rest = line.split(" ", 2)
        if called == name:
            out.append((float(stamp), rest[0] if rest else ""))
    return out


def run_span(run_dir: Path):
    """(start, end) of rank 0 of a finished job, from rank_exec's log header and exit record."""
    header = (run_dir / "logs" / "rank.0.log").read_text().splitlines()[0]
    started = time.mktime(time.strptime(re.search(r"started (.+) ====", header).group(1), "%Y-%m-%d %H:%M:%S"))
    ended = json.loads((run_dir / "logs" / "rank.0.exit.json").read_text())["time"]
    return started, ended


def test_a_sweep_is_one_job_array_polled_with_one_query_per_round(cluster, tiny_data, tmp_path):
    sweep_dir = tmp_path / "a sweep \"q\" 'x' $HOME 50%"
    name = "my \"job\" 'x' 10%"
    shims, log = recording_path(tmp_path)
    env = env_for(cluster)
    env["PATH"] = f"{shims}{os.pathsep}{env['PATH']}"
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4,4e-4",
        *small(tiny_data, "trainer.epochs=1"),
        "launcher.concurrent=2",
        f"launcher.job_name={quote_override_value(name)}",
        f"hydra.sweep.dir={quote_override_value(str(sweep_dir))}",
        env=env,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)

    # One sbatch: the array, 2 tasks at a time; each point is its task, in its own run dir.
    assert len(calls(log, "sbatch")) == 1
    array = (sweep_dir / "slurm" / "array-0-2.sbatch").read_text()
    assert "#SBATCH --array=0-2%2" in array.splitlines()
    ids = [job_id(sweep_dir / str(n)) for n in range(3)]
    array_id = ids[0].split("_")[0]
    assert ids == [f"{array_id}_{n}" for n in range(3)], ids
    for n, lr in enumerate((1e-4, 2e-4, 4e-4)):
        m = read_metrics(sweep_dir / str(n))
        assert m["complete"] and m["run"]["lr_config"] == lr
        assert f"Slurm job {ids[n]} completed" in out
        assert "rank 0/1" in (sweep_dir / str(n) / "slurm" / f"slurm-{ids[n]}.out").read_text()
    assert "Sweep summary" in out
    rows = list(csv.DictReader(open(sweep_dir / "sweep_summary.csv")))
    assert [(r["varied"], r["status"]) for r in rows] == [
        ("optimizer.lr=0.0001", "ok"),
        ("optimizer.lr=0.0002", "ok"),
        ("optimizer.lr=0.0004", "ok"),
    ]
    # Submitted together (the one sbatch above), the first two points ran at the same time (concurrent=2).
    (start_a, end_a), (start_b, end_b) = run_span(sweep_dir / "0"), run_span(sweep_dir / "1")
    assert start_b < end_a and start_a < end_b, "the two points did not run at the same time"
    # Slurm read the name and the paths as written: nothing split, quotes kept, % not expanded.
    shown = cluster.run("scontrol", "-o", "show", "job", ids[0]).stdout
    assert f"JobName={name} " in shown
    assert sorted(p.name for p in (sweep_dir / "slurm").glob("array-*.out")) == [f"array-{i}.out" for i in ids]

    # One status query per round: every squeue asks for all points not yet reported, a round apart.
    status = calls(log, "squeue")
    assert status and not [c for c in calls(log, "scontrol") if " show job" in c[1]]
    gaps = [b[0] - a[0] for a, b in zip(status, status[1:])]
    assert min(gaps) > 0.5, f"{len(status)} squeue calls, some within one round: {sorted(gaps)[:5]}"
    assert set(re.search(r"--jobs=(\S+)", status[0][1]).group(1).split(",")) == set(ids)
