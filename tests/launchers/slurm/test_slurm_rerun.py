"""Re-running a Slurm sweep on the real Slurm (tests/helpers/slurm_cluster.py): a re-run continues exactly what
each point's run dir holds, or is refused for that point before anything in it is rewritten.

Issue 31: after the launcher was gone, a re-run with changed sweep values followed the old job and
labelled its result with the new value; a point trained with lr 1e-4 resumed with 5e-4; a completed
point was submitted again beside the followed one despite launcher.concurrent=1.
"""

import os
import signal

import pytest
from omegaconf import OmegaConf

from helpers.cli import assert_ok, one_error_line, read_metrics, run_cli, start_cli, wait_for
from helpers.slurm_jobs import REAL_SLURM, env_for, job_id, job_state, small

pytestmark = REAL_SLURM


def lr_of(point_dir) -> float:
    return OmegaConf.load(point_dir / ".hydra" / "config.yaml").optimizer.lr


def test_a_killed_sweep_rerun_neither_resubmits_a_finished_point_nor_resumes_one_with_another_lr(
    cluster, tiny_data, tmp_path
):
    sweep = tmp_path / "sweep"
    args = small(tiny_data, "trainer.epochs=3", "launcher.concurrent=1", f"hydra.sweep.dir={sweep}")
    proc = start_cli("-m", "optimizer.lr=1e-4,2e-4", *args, env=env_for(cluster))
    wait_for(
        lambda: (
            (read_metrics(sweep / "0") if (sweep / "0" / "metrics.json").is_file() else {}).get("complete")
            and job_state(cluster, job_id(sweep / "1")) == "RUNNING"
        ),
        600,
        proc,
        "point #0 to finish, #1 to run",
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    finished, running = job_id(sweep / "0"), job_id(sweep / "1")

    # Re-run with changed values, the launcher gone: the changed point #1 does not follow the old job, nor
    # does its result come home under the new value; its job runs on untouched (point #0 finished: nothing to do).
    changed = run_cli("-m", "optimizer.lr=1e-4,3e-4", *args, "launcher.wait=false", env=env_for(cluster), timeout=300)
    out = changed.stdout + changed.stderr
    assert changed.returncode == 1, out[-3000:]  # point #1 failed alone
    assert "point #1 (optimizer.lr=0.0003 " in out and f"holds Slurm job {running} (" in out
    assert "optimizer.lr (job: 0.0002, now: 0.0003)" in out
    assert lr_of(sweep / "1") == 2e-4 and [job_id(sweep / "0"), job_id(sweep / "1")] == [finished, running]
    assert "0.0003" not in (sweep / "sweep_summary.csv").read_text()  # no result under the new value
    assert job_state(cluster, running) in ("RUNNING", "PENDING")

    rerun = run_cli("-m", "optimizer.lr=1e-4,2e-4", *args, env=env_for(cluster), timeout=600)
    out = rerun.stdout + rerun.stderr
    assert_ok(rerun)
    assert f"{sweep / '0'} already finished its 3 epoch(s) on 1 rank(s): nothing to submit" in out
    assert "submitted Slurm job" not in out and job_id(sweep / "0") == finished  # nothing submitted again
    assert "following it instead of submitting again" in out and read_metrics(sweep / "1")["complete"]

    before = (sweep / "0" / ".hydra" / "config.yaml").read_bytes()
    changed = run_cli("-m", "optimizer.lr=5e-4", *args, env=env_for(cluster), timeout=300)
    line = one_error_line(changed)
    assert line.startswith("cifar_dist: error: point #0 (") and "optimizer.lr (was 0.0001, now 0.0005)" in line
    assert (sweep / "0" / ".hydra" / "config.yaml").read_bytes() == before


@pytest.mark.slow  # ~30 s on the real Slurm; the re-run tests of hostile 1, 3 and 15 stay in the default suite
def test_a_point_submitted_again_waits_for_the_followed_task_under_concurrent_1(cluster, tiny_data, tmp_path):
    sweep = tmp_path / "sweep"
    args = small(
        tiny_data, "trainer.epochs=50", "launcher.concurrent=1", "launcher.wait=false", f"hydra.sweep.dir={sweep}"
    )
    first = run_cli("-m", "optimizer.lr=1e-4,2e-4", *args, env=env_for(cluster), timeout=300)
    assert_ok(first)
    cancelled = job_id(sweep / "0")
    wait_for(lambda: job_state(cluster, cancelled) == "RUNNING", 300, what="task 0 to run")
    cluster.run("scancel", cancelled)  # point #0 unfinished; task 1 of the array runs next
    followed = job_id(sweep / "1")
    wait_for(lambda: job_state(cluster, followed) == "RUNNING", 300, what="task 1 to run")

    again = run_cli("-m", "optimizer.lr=1e-4,2e-4", *args, env=env_for(cluster), timeout=300)
    assert_ok(again)
    resubmitted = job_id(sweep / "0")
    assert resubmitted != cancelled and job_id(sweep / "1") == followed
    shown = cluster.run("scontrol", "-o", "show", "job", resubmitted).stdout
    assert f"Dependency=afterany:{followed}" in shown and job_state(cluster, resubmitted) == "PENDING", shown
