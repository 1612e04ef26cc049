"""launcher=slurm against a real single-node Slurm (tests/helpers/slurm_cluster.py), with real training.

Every run trains the seed CNN (64 dense units) on 256 real images of the
packaged sample, 32 per batch, so that an epoch takes seconds; what is
checked is behaviour: ranks, streaming, requeues, resubmissions, failures.
"""

import json
import os
import re
import signal
from pathlib import Path

import pytest

from helpers.cli import assert_ok, error_lines, read_metrics, run_cli, start_cli, wait_for
from helpers.slurm_jobs import REAL_SLURM, env_for, job_id, job_state, small

pytestmark = [*REAL_SLURM, pytest.mark.xdist_group("slurm_e2e")]  # one worker runs two_rank_run (--dist loadgroup)


def running(cluster, run_dir: Path) -> bool:
    return bool(job_id(run_dir)) and job_state(cluster, job_id(run_dir)) == "RUNNING"


def checkpoints(run_dir: Path):
    return sorted((run_dir / "checkpoints").glob("checkpoint-*.h5")) if (run_dir / "checkpoints").is_dir() else []


@pytest.fixture(scope="module")
def two_rank_run(slurm, tiny_data, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("slurm-two") / "run"
    proc = run_cli(
        *small(tiny_data, "launcher.ntasks_per_node=2", "trainer.epochs=2", f"hydra.run.dir={run_dir}"),
        env=env_for(slurm),
        timeout=900,
    )
    slurm.cancel_all()
    return run_dir, proc


def test_dry_run_writes_the_batch_script_and_submits_nothing(cluster, tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        *small(
            tiny_data,
            "launcher.dry_run=true",
            "launcher.nodes=2",
            "launcher.ntasks_per_node=4",
            "launcher.partition=gpu",
            "launcher.time_min=120",
            f"hydra.run.dir={run_dir}",
        ),
        env=env_for(cluster),
        timeout=300,
    )
    assert_ok(proc)
    script = run_dir / "slurm" / "job.sbatch"
    text = script.read_text()
    assert f"Dry run: wrote {script}" in proc.stdout and text in proc.stdout
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --partition=gpu", "#SBATCH --time=120"):
        assert line in text.splitlines()
    assert cluster.job_ids() == [] and not job_id(run_dir)


def test_a_submission_slurm_refuses_is_one_line_naming_its_reason(cluster, tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        *small(tiny_data, "launcher.partition=nosuchpartition", f"hydra.run.dir={run_dir}"),
        env=env_for(cluster),
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = error_lines(proc)
    assert len(errors) == 1 and "sbatch refused" in errors[0] and "invalid partition" in errors[0].lower(), errors
    assert cluster.job_ids() == [] and not job_id(run_dir)


def test_two_ranks_under_srun_pmix_stream_rank_0(two_rank_run):
    run_dir, proc = two_rank_run
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    jid = job_id(run_dir)
    assert f"submitted Slurm job {jid}: 1 node(s) x 2 process(es)" in out
    assert f"Slurm job {jid}: RUNNING on localhost" in out and f"Slurm job {jid} completed" in out
    m = read_metrics(run_dir)
    assert m["complete"] and m["ranks"] == 2 and m["ranks_in_sync"]  # Horovod saw a 2-rank world
    assert [e["epoch"] for e in m["epochs"]] == [1, 2]
    # Rank 0's output reached this console through the job's output file; rank 1 only its own log.
    assert "rank 0/2" in out and "rank 1/2" not in out
    assert "rank 1/2" in (run_dir / "logs" / "rank.1.log").read_text()
    assert "rank 0/2" in (run_dir / "slurm" / f"slurm-{jid}.out").read_text()


def test_evaluate_runs_on_slurm(cluster, two_rank_run, tiny_data, tmp_path):
    trained, _ = two_rank_run
    run_dir = tmp_path / "eval"
    proc = run_cli(
        *small(tiny_data, "task=evaluate", f"evaluate.model={trained}", f"hydra.run.dir={run_dir}"),
        env=env_for(cluster),
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    assert evaluation["ranks"] == 1 and evaluation["labelled"] == 64
    assert f"Test accuracy: {evaluation['accuracy']:.4f}" in out


@pytest.mark.slow  # ~4 min on a busy machine: two jobs one after another until the sweep launcher uses launch_all
def test_a_multirun_sweep_on_slurm_returns_each_points_result(cluster, tiny_data, tmp_path):
    # Points go through the launcher one after another here, or all at once through
    # launch_all where the sweep launcher groups them; either way each point is a Slurm job.
    sweep_dir = tmp_path / "sweep"
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4",
        *small(tiny_data, "trainer.epochs=1"),
        f"hydra.sweep.dir={sweep_dir}",
        env=env_for(cluster),
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    ids = {job_id(sweep_dir / str(n)) for n in (0, 1)}
    assert len(ids) == 2 and "" not in ids
    for num, lr in ((0, 1e-4), (1, 2e-4)):
        m = read_metrics(sweep_dir / str(num))
        assert m["complete"] and m["run"]["lr_config"] == lr
    assert "Sweep summary" in out


def test_requeue_and_the_stop_signal_resume_from_the_checkpoint(cluster, tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    epochs = 6
    proc = start_cli(*small(tiny_data, f"trainer.epochs={epochs}", f"hydra.run.dir={run_dir}"), env=env_for(cluster))
    wait_for(lambda: checkpoints(run_dir), 600, proc, "the first checkpoint")
    jid = job_id(run_dir)
    cluster.run("scontrol", "requeue", jid)  # as a preemption does: killed, back in the queue
    out_file = run_dir / "slurm" / f"slurm-{jid}.out"
    wait_for(lambda: "(restart 1)" in out_file.read_text(), 300, proc, "the job to start again")
    seen = len(checkpoints(run_dir))
    wait_for(lambda: len(checkpoints(run_dir)) > seen and running(cluster, run_dir), 600, proc, "a new checkpoint")
    # What Slurm sends signal_grace_s before the time limit (--signal=B:USR1@N).
    cluster.run("scancel", "--signal=USR1", "--batch", jid)
    out, _ = proc.communicate(timeout=900)

    assert_ok(proc, out)
    assert f"Slurm job {jid} was requeued (restart 1" in out and f"Slurm job {jid} was requeued (restart 2" in out
    assert "the ranks stop after this epoch" in out and "stop signal SIGUSR1: stopping after epoch" in out
    assert f"requeueing job {jid} (restart 2 of 3)" in out_file.read_text()  # scontrol requeue was restart 1
    assert "completed after 2 requeue(s)" in out
    m = read_metrics(run_dir)
    assert m["complete"] and m["resumed_from_epoch"] >= 2
    assert [e["epoch"] for e in m["epochs"]] == list(range(1, epochs + 1))


def test_ctrl_c_cancels_the_job(cluster, tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    proc = start_cli(*small(tiny_data, "trainer.epochs=50", f"hydra.run.dir={run_dir}"), env=env_for(cluster))
    wait_for(lambda: running(cluster, run_dir), 300, proc, "the job to run")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    jid = job_id(run_dir)
    assert proc.returncode == 130, out[-3000:]
    assert f"cancelled Slurm job {jid} (scancel {jid})" in out
    wait_for(lambda: job_state(cluster, jid) == "CANCELLED", 60, what="the job to be cancelled")


def test_wait_false_submits_and_says_how_to_follow(cluster, tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        *small(tiny_data, "launcher.wait=false", f"hydra.run.dir={run_dir}"), env=env_for(cluster), timeout=300
    )
    out = proc.stdout + proc.stderr
    jid = job_id(run_dir)
    assert_ok(proc)
    assert f"follow it with `squeue -j {jid}` and `tail -f {run_dir / 'slurm' / f'slurm-{jid}.out'}`" in out
    assert job_state(cluster, jid) in ("PENDING", "RUNNING")


def test_a_failing_rank_is_named_with_the_tail_of_its_log(cluster, tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    proc = start_cli(
        *small(tiny_data, "launcher.ntasks_per_node=2", "trainer.epochs=50", f"hydra.run.dir={run_dir}"),
        env=env_for(cluster),
    )
    rank_1_log = run_dir / "logs" / "rank.1.log"
    # Horovod is up on both ranks once rank 1 has logged its place in the world.
    wait_for(lambda: rank_1_log.exists() and "rank 1/2" in rank_1_log.read_text(), 600, proc, "Horovod on rank 1")
    os.kill(trainer_pid(run_dir, rank=1), signal.SIGKILL)
    out, _ = proc.communicate(timeout=300)
    jid = job_id(run_dir)
    assert proc.returncode != 0, out[-3000:]
    assert f"Slurm job {jid} ended FAILED" in out
    assert re.search(r"rank 1 on \S+ was killed by signal 9 \(SIGKILL\)", out), out[-3000:]
    assert f"Last lines of {run_dir / 'logs' / 'rank.1.log'}" in out
    # killed before its first checkpoint: nothing to resume, said so (was: "Checkpoints in ... are kept")
    assert "No checkpoint was written: nothing to resume." in out and "are kept" not in out


@pytest.mark.slow  # 1.4 min; requeue + resume on the real Slurm stays in the default suite
def test_a_job_its_time_limit_ended_is_resubmitted_and_continues(cluster, two_rank_run, tiny_data, tmp_path):
    trained, _ = two_rank_run
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    first = trained / "checkpoints" / "checkpoint-001.h5"
    (run_dir / "checkpoints" / first.name).write_bytes(first.read_bytes())
    marker = tmp_path / "first-job"
    # The first job sleeps past its 1-minute limit (Slurm ends it TIMEOUT within ~90 s);
    # the resubmitted one finds the marker and trains.
    proc = start_cli(
        *small(
            tiny_data,
            "trainer.epochs=2",
            "launcher.time_min=1",
            "launcher.signal_grace_s=0",
            f"launcher.setup=['[ -e {marker} ] || {{ touch {marker}; sleep 600; }}']",
            f"hydra.run.dir={run_dir}",
        ),
        env=env_for(cluster),
    )
    wait_for(lambda: job_id(run_dir), 120, proc, "the submission")
    first_id = job_id(run_dir)
    wait_for(lambda: job_id(run_dir) not in ("", first_id), 300, proc, "the resubmission")
    # The same script asks for 1 minute again, too little for a busy machine's TensorFlow start:
    # give the resubmitted job the time a real one would have asked for.
    cluster.run("scontrol", "update", f"JobId={job_id(run_dir)}", "TimeLimit=30")
    out, _ = proc.communicate(timeout=900)
    assert_ok(proc, out)
    outputs = sorted((run_dir / "slurm").glob("slurm-*.out"))
    assert len(outputs) == 2
    first_id, second_id = sorted((p.name[6:-4] for p in outputs), key=int)
    assert (
        f"Slurm job {first_id} reached its time limit (TIMEOUT); resubmitted as Slurm job {second_id} "
        "(resubmission 1 of 3)"
    ) in out
    assert f"Slurm job {second_id} completed after 1 resubmission(s)" in out
    m = read_metrics(run_dir)
    assert m["complete"] and m["resumed_from_epoch"] == 1 and [e["epoch"] for e in m["epochs"]] == [2]


def trainer_pid(run_dir: Path, rank: int) -> int:
    """The training process (not its rank_exec wrapper) of one rank of the job in run_dir."""
    needle = str(run_dir).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            cmdline[1:3] == [b"-m", b"cifar_dist"]
            and any(needle in a for a in cmdline)
            and f"SLURM_PROCID={rank}".encode() in environ
        ):
            return int(entry.name)
    raise LookupError(f"rank {rank} of {run_dir} not running")
