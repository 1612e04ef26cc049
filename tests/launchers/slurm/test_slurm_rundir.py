"""A running Slurm job's run dir on the real Slurm (tests/helpers/slurm_cluster.py): Ctrl-C with
``launcher.on_interrupt=detach`` leaves the job running, the job holds its lock, a re-run with other settings is
refused without rewriting anything, the same command follows it, a scancel is reported as such.

One job (detached by Ctrl-C once it runs, long enough to outlive the module) serves the tests in file order; the
last one follows it, then cancels it.
"""

import signal
import time

import pytest

from cifar_dist.rundir.checkpoints import list_checkpoints
from cifar_dist.rundir.lock import LOCK_NAME
from helpers.cli import one_error_line, run_cli, start_cli, wait_for
from helpers.slurm_jobs import REAL_SLURM, env_for, job_id, job_state, small

pytestmark = [*REAL_SLURM, pytest.mark.xdist_group("slurm_rundir")]  # one worker submits held_run (--dist loadgroup)

EPOCHS = 50


def running(cluster, run_dir) -> bool:
    return bool(job_id(run_dir)) and job_state(cluster, job_id(run_dir)) == "RUNNING"


@pytest.fixture(scope="module")
def held_run(slurm, tiny_data, tmp_path_factory):
    """The job, and the output of its launcher, stopped by Ctrl-C (SIGINT) once the job ran."""
    run_dir = tmp_path_factory.mktemp("slurm-held") / "run"
    overrides = small(tiny_data, f"trainer.epochs={EPOCHS}", "launcher.on_interrupt=detach", f"hydra.run.dir={run_dir}")
    proc = start_cli(*overrides, env=env_for(slurm))
    try:
        wait_for(lambda: running(slurm, run_dir), 300, proc, "the job to run")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    jid = job_id(run_dir)
    lock = run_dir / LOCK_NAME
    # Its batch script takes the lock once the launcher has let go.
    wait_for(lambda: lock.read_text().startswith(f"Slurm job {jid}: pid "), 300, what="the job to hold its run dir")
    yield run_dir, jid, overrides, proc.returncode, out
    slurm.cancel_all()


def test_ctrl_c_with_detach_leaves_the_job_running(held_run, slurm):
    run_dir, jid, _, returncode, out = held_run
    assert returncode == 130, out[-3000:]
    assert f"Slurm job {jid} keeps running: follow it with `squeue -j {jid}`" in out
    assert job_state(slurm, jid) == "RUNNING"


def test_another_run_into_a_running_jobs_run_dir_is_refused_naming_the_job(held_run, slurm):
    run_dir, jid, *_ = held_run
    saved = (run_dir / ".hydra" / "config.yaml").read_bytes()
    proc = run_cli("data=sample", f"hydra.run.dir={run_dir}", env=env_for(slurm), timeout=300)
    line = one_error_line(proc)
    assert f"run dir {run_dir} is in use by Slurm job {jid}: pid " in line and " on host " in line, line
    assert (run_dir / ".hydra" / "config.yaml").read_bytes() == saved  # refused before Hydra wrote anything
    assert job_state(slurm, jid) == "RUNNING"


def test_a_rerun_that_would_follow_the_job_with_other_settings_is_refused_and_rewrites_nothing(held_run, slurm):
    run_dir, jid, overrides, *_ = held_run
    saved = {p: p.read_bytes() for p in (run_dir / ".hydra" / "config.yaml", run_dir / "slurm" / "job.sbatch")}
    changed = [o for o in overrides if not o.startswith("trainer.epochs=")] + ["trainer.epochs=10"]
    proc = run_cli(*changed, env=env_for(slurm), timeout=300)
    line = one_error_line(proc)
    assert (
        f"holds Slurm job {jid} (RUNNING), submitted with other settings: trainer.epochs (job: {EPOCHS}, now: 10)"
        in line
        and f"scancel {jid}" in line
    ), line
    assert {p: p.read_bytes() for p in saved} == saved
    assert job_id(run_dir) == jid and job_state(slurm, jid) == "RUNNING"


def test_a_job_cancelled_with_scancel_is_reported_as_cancelled(held_run, slurm):
    run_dir, jid, overrides, *_ = held_run
    # As a user who comes back to a job later: it has written checkpoints, so engine=auto now says it keeps
    # their engine (engine.why), a note that must not count as another setting.
    wait_for(lambda: list_checkpoints(run_dir / "checkpoints"), 300, what="the job's first checkpoint")
    proc = start_cli(*overrides, env=env_for(slurm))  # the same command: it follows the job, submits none
    out = ""
    deadline = time.time() + 120
    while "following it instead of submitting again" not in out and time.time() < deadline:
        out += proc.stdout.readline()
    assert f"Slurm job {jid} of this run dir is RUNNING: following it" in out and job_id(run_dir) == jid
    slurm.run("scancel", jid)
    rest, _ = proc.communicate(timeout=120)
    out += rest
    assert proc.returncode == 1, out[-3000:]
    assert f"Slurm job {jid} was cancelled" in out and "re-run with hydra.run.dir=" in out, out[-3000:]
    assert "killed by signal 15" not in out and "SIGTERM" not in out, out[-3000:]
