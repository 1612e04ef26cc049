"""Real multi-rank runs through the launchers on the packaged sample (short ones).

Each run trains a few 16-step epochs per rank (shard policy, batch 128), which
is enough to check behaviour; speed is measured by benchmarks/bench_scaling.py,
never here.
"""

import csv
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import (
    assert_ok,
    cli_env_with_automatic_threads,
    read_metrics,
    run_cli,
    start_cli,
    tiny_cifar,
    wait_for,
)
from helpers.mpirun_jobs import QUICK, processes_of, rank_pid

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.horovod,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed"),
]


def test_sweep_whose_points_each_run_on_two_ranks(tiny_data, tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4",
        "launcher=mpirun",
        "launcher.np=2",
        *QUICK,
        *tiny_cifar(tiny_data),  # after QUICK's debug=fast (the command line wins): logs and records are asserted
        "trainer.epochs=1",
        f"hydra.sweep.dir={sweep_dir}",
        env=cli_env_with_automatic_threads(),  # the threads asserted are the launcher's binding's
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)

    for num, lr in ((0, 1e-4), (1, 2e-4)):
        run_dir = sweep_dir / str(num)
        m = read_metrics(run_dir)
        assert m["complete"] and m["ranks"] == 2 and m["ranks_in_sync"]
        assert m["run"]["lr_config"] == lr and m["run"]["threads_intra_op"] == 1  # bound to one core each
        logs = run_dir / "logs"
        for rank in (0, 1):
            text = (logs / f"rank.{rank}.log").read_text()
            assert f"==== rank {rank}" in text and f"rank {rank}/2" in text
            assert json.loads((logs / f"rank.{rank}.exit.json").read_text())["exit_code"] == 0
        # One Hydra log per run, written by rank 0 (and the launcher), never by rank 1.
        run_log = (run_dir / "cifar_dist.log").read_text()
        assert "rank 0/2" in run_log and "rank 1/2" not in run_log
        assert "[cifar_dist.training.engines.horovod][INFO] - rank 1/2" in (logs / "rank.1.log").read_text()
        assert sorted(p.name for p in (run_dir / ".hydra").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
        assert not list(run_dir.glob("*/.hydra"))

    # Rank 0 streamed to the console; rank 1 only to its log.
    assert "rank 0/2" in out and "rank 1/2" not in out
    assert "Sweep summary" in out
    rows = list(csv.DictReader(open(sweep_dir / "sweep_summary.csv")))
    assert [(r["varied"], r["status"], r["ranks"]) for r in rows] == [
        ("optimizer.lr=0.0001", "ok", "2"),
        ("optimizer.lr=0.0002", "ok", "2"),
    ]  # as Hydra normalises them
    assert (sweep_dir / "sweep_summary.png").stat().st_size > 10_000
    assert not processes_of(sweep_dir)


@pytest.mark.slow  # 2 min; a stopped rank ending the job stays in the default suite (test_heartbeat)
def test_a_killed_rank_stops_the_job_and_a_rerun_resumes(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ("launcher=mpirun", "launcher.np=2", *QUICK, "trainer.epochs=3", f"hydra.run.dir={run_dir}")
    proc = start_cli(*overrides)
    first = run_dir / "checkpoints" / "checkpoint-001.h5"
    wait_for(first.exists, 300, proc, "the first checkpoint")
    time.sleep(2)  # well into epoch 2
    victim = rank_pid(run_dir, 1)
    os.kill(victim, signal.SIGKILL)
    killed_at = time.time()
    out, _ = proc.communicate(timeout=120)
    stopped_after = time.time() - killed_at

    assert proc.returncode != 0, out[-3000:]
    assert stopped_after < 30, f"job took {stopped_after:.0f}s to stop"
    assert "rank 1 on" in out and "was killed by signal 9 (SIGKILL)" in out, out[-3000:]
    assert f"Last lines of {run_dir / 'logs' / 'rank.1.log'}" in out
    assert f"re-run with hydra.run.dir={run_dir}" in out
    assert not processes_of(run_dir), "ranks left running"
    # The checkpoint written before the kill is intact, and nothing half-written is left.
    assert first.exists() and not [p for p in (run_dir / "checkpoints").iterdir() if not p.name.endswith(".h5")]

    # A short stall shutdown: should the ranks disagree after resuming, the
    # job ends in under a minute instead of hanging the suite.
    rerun = run_cli(*overrides, "launcher.stall_shutdown_s=40", timeout=600)
    assert_ok(rerun)
    m = read_metrics(run_dir)
    assert m["complete"] and m["resumed_from_epoch"] >= 1
    assert [e["epoch"] for e in m["epochs"]] == [1, 2, 3]


def test_ctrl_c_stops_every_rank(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_cli("launcher=mpirun", "launcher.np=2", *QUICK, "trainer.epochs=20", f"hydra.run.dir={run_dir}")
    wait_for(
        lambda: (
            "Epoch 1/" in (run_dir / "logs" / "rank.0.log").read_text()
            if (run_dir / "logs" / "rank.0.log").exists()
            else False
        ),
        300,
        proc,
        "training to start",
    )
    assert len(processes_of(run_dir)) >= 5  # mpirun, 2 wrappers, 2 ranks
    proc.send_signal(signal.SIGINT)
    interrupted_at = time.time()
    out, _ = proc.communicate(timeout=60)
    assert time.time() - interrupted_at < 15
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted: all ranks stopped" in out
    assert not processes_of(run_dir)


@pytest.mark.slow  # ~40 s; the Gloo command itself is checked in tests/launchers/test_launcher_command.py
@pytest.mark.skipif(
    shutil.which("horovodrun") is None and not (Path(sys.executable).parent / "horovodrun").exists(),
    reason="horovodrun not installed",
)
def test_gloo_two_ranks(tmp_path):
    run_dir = tmp_path / "run"
    horovodrun = shutil.which("horovodrun") or str(Path(sys.executable).parent / "horovodrun")
    proc = run_cli(
        "launcher=gloo",
        f"launcher.horovodrun={horovodrun}",
        "launcher.np=2",
        *QUICK,
        "trainer.epochs=1",
        f"hydra.run.dir={run_dir}",
        env=cli_env_with_automatic_threads(),  # the threads asserted are the launcher's binding's
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    m = read_metrics(run_dir)
    assert m["complete"] and m["ranks"] == 2 and m["ranks_in_sync"]
    assert m["run"]["threads_intra_op"] == 1  # the wrapper bound each rank to one core
    assert "rank 1/2" in (run_dir / "logs" / "rank.1.log").read_text()
    assert "rank 0/2" in out and "rank 1/2" not in out and "<stdout>:" not in out
