"""The Slurm launcher's parts that need no cluster: settings, the batch script, scontrol's output."""

import json
import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cifar_dist.launchers.base import JobSpec, LaunchError
from cifar_dist.launchers.ranks.rank_failure import first_failure
from cifar_dist.launchers.slurm.client import job_info, parse_show_job
from cifar_dist.launchers.slurm.config import SlurmLauncherConf, check, conf_from_kwargs
from cifar_dist.launchers.slurm.launcher import SlurmLauncher
from cifar_dist.launchers.slurm.script import STOP_SIGNAL_ENV, batch_script, sbatch_options

# One line of `scontrol -o show job` from the test cluster (22.05), shortened.
SHOW_JOB = (
    "JobId=7 JobName=cifar_dist UserId=root(0) GroupId=root(0) Priority=4294901754 Nice=0 Account=(null) "
    "QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 "
    "ExitCode=0:0 RunTime=00:00:04 TimeLimit=00:10:00 NodeList=localhost BatchHost=localhost NumNodes=1 "
    "Command=/tmp/a run/slurm/job.sbatch WorkDir=/tmp StdOut=/tmp/a run/slurm/slurm-7.out Power="
)


def job(tmp_path: Path, *overrides: str) -> JobSpec:
    cfg = OmegaConf.create({"task": {"name": "train"}, "trainer": {"resume": "auto"}})
    return JobSpec(cfg=cfg, output_dir=tmp_path / "run dir", task_overrides=list(overrides), original_cwd=tmp_path)


def test_every_allocation_key_becomes_its_sbatch_option(tmp_path):
    conf = conf_from_kwargs(
        dict(
            nodes=2,
            ntasks_per_node=4,
            cpus_per_task=3,
            gpus_per_node=4,
            mem_gb=1.5,
            partition="gpu",
            account="proj",
            qos="high",
            time_min=120,
            constraint="a100",
            exclusive=True,
            sbatch_lines=["--reservation=r1"],
            signal_grace_s=90,
            forward_env=["PATH", "HOME"],
        )
    )
    opts = sbatch_options(conf, job(tmp_path))
    assert opts == [
        "--job-name=cifar_dist",
        "--nodes=2",
        "--ntasks-per-node=4",
        "--cpus-per-task=3",
        "--gpus-per-node=4",
        "--mem=1536M",
        "--partition=gpu",
        "--account=proj",
        "--qos=high",
        "--constraint=a100",
        "--time=120",
        "--exclusive",
        f"--output={tmp_path / 'run dir' / 'slurm' / 'slurm-%j.out'}",
        "--open-mode=append",
        f"--chdir={tmp_path}",
        "--export=PATH,HOME",
        "--requeue",
        "--signal=B:USR1@90",
        "--reservation=r1",
    ]


@pytest.mark.parametrize(
    "forward_env, export",
    [(["ALL"], "ALL"), (["PATH", "HOME"], "PATH,HOME,DB_PASS,SECRET_KEY_BASE"), (["NONE"], "DB_PASS,SECRET_KEY_BASE")],
)
def test_a_secret_in_launcher_env_is_exported_by_name_and_never_written(tmp_path, forward_env, export):
    """Issue 47, item 5: sbatch passes a secret-named ``launcher.env`` entry from its own environment; issue 57,
    item 12: ``SECRET_KEY_BASE`` (a secret word not at the end) was written into the script."""
    secrets = {"DB_PASS": "Pa55-value", "SECRET_KEY_BASE": "Base-value"}
    conf = conf_from_kwargs(dict(env={**secrets, "NCCL_DEBUG": "INFO"}, forward_env=forward_env))
    assert f"--export={export}" in sbatch_options(conf, job(tmp_path))
    script = batch_script(conf, job(tmp_path), python="/usr/bin/python3")
    assert "Pa55-value" not in script and "Base-value" not in script and "export NCCL_DEBUG=INFO" in script.splitlines()
    assert SlurmLauncher(env=conf.env, forward_env=forward_env).client.job_env == secrets


@pytest.mark.parametrize(
    "engine, asked, expected",
    [
        ("jax", "auto", "none"),  # JAX's ranks meet through Slurm's variables: no PMIx plugin needed
        ("horovod", "auto", "pmix"),
        ("tensorflow", "auto", "pmix"),
        (None, "auto", "pmix"),  # an evaluation: the engine its run trained on, maybe over MPI
        ("jax", "pmix", "pmix"),  # launcher.mpi named: taken as it is
        ("horovod", "pmi2", "pmi2"),
    ],
)
def test_srun_gets_no_mpi_plugin_for_engine_jax_unless_one_is_named(tmp_path, engine, asked, expected):
    spec = job(tmp_path)
    if engine is not None:
        spec.cfg.engine = {"name": engine}
    text = batch_script(conf_from_kwargs(dict(mpi=asked)), spec, python="/opt/py/bin/python")
    ranks = next(line for line in text.splitlines() if line.startswith("srun "))
    assert shlex.split(ranks.rstrip("&"))[1] == f"--mpi={expected}"


def test_the_batch_script_starts_the_jobs_own_overrides_on_every_rank(tmp_path):
    conf = conf_from_kwargs(
        dict(setup=["module load cuda", "source /opt/venv/bin/activate"], env={"NCCL_DEBUG": "INFO"}, max_resubmits=2)
    )
    spec = job(tmp_path, "optimizer.lr=0.0002", "launcher=slurm", "launcher.nodes=1")
    text = batch_script(conf, spec, python="/opt/py/bin/python")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)  # valid shell
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    ranks = next(line for line in lines if line.startswith("srun "))
    argv = shlex.split(ranks.rstrip("&"))
    assert argv[:4] == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--export=ALL"]
    child = argv[argv.index("--") + 1 :]
    assert child[:3] == ["/opt/py/bin/python", "-m", "cifar_dist"]
    assert "optimizer.lr=0.0002" in child and "launcher=local" in child and "launcher.nodes=1" not in child
    assert f"hydra.run.dir='{spec.output_dir}'" in child
    assert lines.index("module load cuda") < lines.index(ranks)  # set-up before the ranks
    assert "export CIFAR_DIST_CHILD=1" in lines and "export NCCL_DEBUG=INFO" in lines
    assert f"export {STOP_SIGNAL_ENV}=USR1" in lines and "trap on_stop_signal USR1" in lines
    assert 'scontrol requeue "$SLURM_JOB_ID"' in text and "-lt 2" in text


def test_mpirun_inside_the_allocation_and_no_stop_signal(tmp_path):
    conf = conf_from_kwargs(
        dict(ranks="mpirun", signal_grace_s=0, requeue=False, mpirun_args=["--mca", "btl", "self,tcp"])
    )
    text = batch_script(conf, job(tmp_path), python="python3")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    ranks = next(line for line in text.splitlines() if line.startswith("mpirun "))
    assert "-x CIFAR_DIST_CHILD" in ranks and "--mca btl self,tcp" in ranks
    assert "--signal" not in text and "#SBATCH --no-requeue" in text
    assert STOP_SIGNAL_ENV not in text and "scontrol requeue" not in text


@pytest.mark.parametrize(
    "asked, tasks, gpu_lines",
    [
        (dict(), 1, []),  # no GPU: one process a node
        (dict(gpus_per_node=4), 4, ["--gpus-per-node=4"]),  # one process per GPU (the default)
        (dict(gres="gpu:a100:8"), 8, ["--gres=gpu:a100:8"]),
        (dict(gres="gpu"), 1, ["--gres=gpu"]),
        (dict(gpus_per_node=4, ntasks_per_node=1), 1, ["--gpus-per-node=4"]),  # one process over the node's 4 GPUs
        (dict(gpus_per_task=1, ntasks_per_node=4), 4, ["--gpus-per-task=1"]),  # each task its own, bound by Slurm
        (dict(gpus_per_task=4), 1, ["--gpus-per-task=4"]),
    ],
)
def test_the_processes_a_node_runs_follow_the_gpus_asked_for_unless_named(tmp_path, asked, tasks, gpu_lines):
    """A rank is a device; where the layout is the user's to choose, the default is one process per GPU (what JAX's
    docs recommend and Horovod needs); launcher.ntasks_per_node=1 is one process over all of a node's GPUs."""
    conf = conf_from_kwargs(dict(nodes=2, **asked))
    opts = sbatch_options(conf, job(tmp_path))
    assert f"--ntasks-per-node={tasks}" in opts and conf.world_size == 2 * tasks
    assert [o for o in opts if o.startswith(("--gpus", "--gres"))] == gpu_lines
    assert bool(SlurmLauncher(**{**asked, "nodes": 2}).gpus_per_process()) is bool(gpu_lines)


def test_bad_settings_are_one_line_listing_each(tmp_path):
    with pytest.raises(LaunchError) as err:
        check(SlurmLauncherConf(nodes=0, gpus_per_node=1, gres="gpu:1", time_min=2, signal_grace_s=300))
    message = str(err.value)
    assert "\n" not in message
    assert "launcher.nodes=0 must be >= 1" in message
    assert "set one of launcher.gpus_per_node and launcher.gres: each asks Slurm for the job's GPUs" in message
    assert "launcher.signal_grace_s=300 must be below the time limit (2 min)" in message
    with pytest.raises(ValueError):
        conf_from_kwargs({"on_interrupt": "ignore"})


def test_scontrol_show_job_is_read_field_by_field():
    fields = parse_show_job(SHOW_JOB)
    assert fields["Command"] == "/tmp/a run/slurm/job.sbatch"  # values with spaces survive
    info = job_info(fields)
    assert (info.job_id, info.state, info.nodes, info.restarts, info.finished) == (
        "7",
        "RUNNING",
        "localhost",
        2,
        False,
    )
    done = job_info(parse_show_job("JobId=8 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 Restarts=0"))
    assert done.finished and done.exit_code == 3 and done.exit_signal == 0
    assert job_info(parse_show_job("JobId=9 JobState=CANCELLED+ ExitCode=0:15")).state == "CANCELLED"


def test_srun_names_the_failed_task_when_no_rank_left_a_record(tmp_path):
    (tmp_path / "rank.1.log").write_text("Traceback ...\nValueError: boom\n")
    srun = "srun: error: node3: task 1: Exited with exit code 2\nsrun: Terminating StepId=5.0\n"
    failure = first_failure(tmp_path, 2, 0, srun)
    assert (failure.rank, failure.host, failure.how) == (1, "node3", "exited with code 2")
    assert "ValueError: boom" in failure.log_tail


def test_the_stop_callback_is_made_only_when_a_launcher_asks():
    from cifar_dist.training.preemption import stop_on_signal_from_env

    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2)}
    try:
        assert stop_on_signal_from_env({}) is None
        assert signal.getsignal(signal.SIGUSR1) == saved[signal.SIGUSR1]
        stop = stop_on_signal_from_env({STOP_SIGNAL_ENV: "USR1"})
        assert stop.signum == signal.SIGUSR1 and not stop.requested
        os.kill(os.getpid(), signal.SIGUSR1)  # caught from the moment it is made, not fatal
        assert stop.requested
        assert stop_on_signal_from_env({STOP_SIGNAL_ENV: "SIGUSR2"}).signum == signal.SIGUSR2
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def test_a_bad_setting_stops_the_cli_with_one_line_before_anything_is_written(tmp_path):
    from helpers.cli import error_lines, run_cli

    run_dir = tmp_path / "run"
    proc = run_cli(
        "launcher=slurm",
        "launcher.nodes=0",
        "launcher.time_min=1",
        "data=sample",
        f"hydra.run.dir={run_dir}",
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = error_lines(proc)
    # Checked with the rest of the config (validation.py), so listed with any other bad value, before Hydra
    # creates the run dir.
    assert errors == [
        "cifar_dist: error: bad config: launcher.nodes=0 must be >= 1; launcher.signal_grace_s=180 "
        "must be below the time limit (1 min)"
    ]
    assert not (run_dir / "slurm").exists() and not run_dir.exists()


class FlakyController:
    """squeue failing ``failures`` times (slurmctld restarting), then reporting the job COMPLETED."""

    def __init__(self, failures: int):
        self.failures = failures

    def states(self, job_ids):
        if self.failures:
            self.failures -= 1
            raise LaunchError("squeue failed: Unable to contact slurm controller")
        return {
            job_id: job_info(parse_show_job(f"JobId={job_id} JobState=COMPLETED ExitCode=0:0 Restarts=0"))
            for job_id in job_ids
        }


def test_a_controller_that_does_not_answer_for_a_while_is_asked_again(tmp_path):
    from cifar_dist.launchers.slurm.monitor import MAX_FAILED_POLLS, SlurmJob

    conf = SlurmLauncherConf(stream_output=False)
    job = SlurmJob(FlakyController(2), conf, tmp_path, tmp_path / "job.sbatch", "5", "train")
    assert job.poll() is None and job.poll() is None
    assert job.poll().exit_code == 0

    hopeless = SlurmJob(FlakyController(MAX_FAILED_POLLS), conf, tmp_path, tmp_path / "job.sbatch", "6", "train")
    for _ in range(MAX_FAILED_POLLS - 1):
        assert hopeless.poll() is None
    with pytest.raises(LaunchError, match="Unable to contact slurm controller"):
        hopeless.poll()


class CountingQueue:
    """squeue as the watch loop sees it: counts calls; each job RUNNING for ``rounds[id]`` rounds, then COMPLETED."""

    def __init__(self, rounds):
        self.rounds = dict(rounds)
        self.calls = []

    def states(self, job_ids):
        self.calls.append(list(job_ids))
        out = {}
        for job_id in job_ids:
            self.rounds[job_id] -= 1
            state = "RUNNING" if self.rounds[job_id] > 0 else "COMPLETED"
            out[job_id] = job_info(parse_show_job(f"JobId={job_id} JobState={state} ExitCode=0:0 Restarts=0"))
        return out

    def show(self, job_id):
        raise AssertionError("scontrol asked although squeue listed every job")


def test_every_poll_round_asks_slurm_once_for_all_watched_jobs(tmp_path):
    from cifar_dist.launchers.cluster_base import watch
    from cifar_dist.launchers.slurm.monitor import SlurmJob
    from cifar_dist.launchers.slurm.queue import JobStates

    queue = CountingQueue({"9_0": 2, "9_1": 4, "9_2": 3})
    states = JobStates(queue)
    conf = SlurmLauncherConf(stream_output=False)
    for i, lr in zip("012", (1e-4, 2e-4, 4e-4)):  # each point's own result, in its run dir
        (tmp_path / i).mkdir()
        (tmp_path / i / "metrics.json").write_text(json.dumps({"complete": True, "run": {"lr_config": lr}}))
    jobs = [
        SlurmJob(queue, conf, tmp_path / i, tmp_path / "job.sbatch", f"9_{i}", "train", states=states) for i in "012"
    ]
    sleeps = []
    results = watch(jobs, 1.0, sleep=sleeps.append)
    assert [r.exit_code for r in results] == [0, 0, 0]
    # In the points' order although they ended in another (#0, #2, #1), each with its own metrics.
    assert [r.metrics["run"]["lr_config"] for r in results] == [1e-4, 2e-4, 4e-4]
    assert len(queue.calls) == len(sleeps) + 1 == 4  # one query a round, four rounds
    assert queue.calls[0] == ["9_0", "9_1", "9_2"] and queue.calls[-1] == ["9_1"]  # ended jobs are not asked again


def test_a_job_someone_cancelled_is_reported_as_cancelled_not_by_its_ranks_signal(tmp_path):
    from cifar_dist.launchers.slurm.monitor import SlurmJob

    class Cancelled(CountingQueue):
        def states(self, job_ids):
            return {j: job_info(parse_show_job(f"JobId={j} JobState=CANCELLED ExitCode=0:15")) for j in job_ids}

        def cancelled_by(self, job_id):
            return "alice"

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank.1.exit.json").write_text('{"rank": 1, "exit_code": -15, "signal": 15, "host": "n1", "time": 9e9}')
    result = SlurmJob(
        Cancelled({}), SlurmLauncherConf(stream_output=False), tmp_path, tmp_path / "job.sbatch", "12", "train"
    ).poll()
    assert result.exit_code == 1
    assert result.message.startswith("Slurm job 12 was cancelled by alice; checkpoints in ")
    assert "signal" not in result.message and f"re-run with hydra.run.dir={tmp_path}" in result.message


def test_a_sweep_array_runs_each_points_own_script_k_at_a_time(tmp_path):
    from cifar_dist.launchers.slurm.script import array_script

    jobs = [
        JobSpec(cfg=OmegaConf.create({}), output_dir=tmp_path / "50% sweep" / str(n), job_num=n, original_cwd=tmp_path)
        for n in range(3)
    ]
    text = array_script(conf_from_kwargs(dict(concurrent=2)), jobs, tmp_path / "50% sweep")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    lines = text.splitlines()
    assert "#SBATCH --array=0-2%2" in lines
    assert f'#SBATCH "--output={tmp_path}/50%% sweep/slurm/array-%A_%a.out"' in lines
    assert f"    2) run_dir={shlex.quote(str(jobs[2].output_dir))} ;;  # point #2" in lines
    assert lines[-1] == 'exec /bin/bash "$run_dir/slurm/job.sbatch"'
    assert "%2" not in array_script(conf_from_kwargs({}), jobs, tmp_path / "50% sweep").split("--array=")[1][:6]


def test_sbatch_values_are_quoted_and_a_percent_in_the_run_dir_is_escaped(tmp_path):
    from cifar_dist.launchers.slurm.script import sbatch_line

    spec = job(tmp_path)
    spec.output_dir = tmp_path / 'my "run" 50%'
    text = batch_script(conf_from_kwargs(dict(job_name="a 'b' $HOME")), spec, python="python3")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    assert "#SBATCH \"--job-name=a 'b' $HOME\"" in text.splitlines()
    assert f'#SBATCH "--output={tmp_path}/my \\"run\\" 50%%/slurm/slurm-%j.out"' in text.splitlines()
    assert sbatch_line("--nodes=2") == "#SBATCH --nodes=2" and sbatch_line("--x=a\\b") == '#SBATCH "--x=a\\\\b"'
    for bad in ("a\nb", "a\\b"):
        spec.output_dir = tmp_path / bad
        with pytest.raises(LaunchError) as err:
            batch_script(conf_from_kwargs({}), spec, python="python3")
        assert "\n" not in str(err.value) and f"run dir {str(spec.output_dir)!r} holds" in str(err.value)


def test_the_batch_scripts_lock_helper_refuses_a_foreign_holder_and_waits_for_its_launcher(tmp_path):
    from cifar_dist.launchers.slurm.rundir_hold import HELD_BY_LAUNCHER, launcher_note, main
    from cifar_dist.rundir.lock import LOCK_NAME, RunDirLock, holder_job, note_holder

    held = RunDirLock(tmp_path).acquire()
    try:
        fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR)
        assert main(["--fd", str(fd), "--job", "7_1", str(tmp_path)]) == 2  # a local run holds it
        assert note_holder(tmp_path, launcher_note("7_1"))  # this process is the launcher following 7_1
        assert main(["--fd", str(fd), "--job", "7_1", str(tmp_path)]) == HELD_BY_LAUNCHER
        assert main(["--fd", str(fd), "--job", "7_2", str(tmp_path)]) == 2  # not the job it follows
    finally:
        held.release()
    assert main(["--fd", str(fd), "--job", "7_1", str(tmp_path)]) == 0
    record = (tmp_path / LOCK_NAME).read_text()
    assert holder_job(record) == "Slurm job 7_1" and f"pid {os.getppid()} on host " in record  # its batch script
    os.close(fd)


class EndsWhenAsked:
    """Jobs that finish the moment their state is asked: from then on their run dirs' records say complete and
    squeue no longer lists them; sbatch must not be called."""

    def __init__(self, run_dirs):
        self.run_dirs = run_dirs  # job id -> run dir

    def states(self, job_ids):
        for job_id in job_ids:
            (self.run_dirs[job_id] / "metrics.json").write_text('{"complete": true, "ranks": 1, "run": {"epochs": 3}}')
        return {}

    def show(self, job_id):
        return job_info(parse_show_job(f"JobId={job_id} JobState=COMPLETED ExitCode=0:0 Restarts=0"))

    def submit(self, script, after=()):
        raise AssertionError(f"{script} submitted although its job had just finished the run")


@pytest.mark.parametrize("points", [1, 2])
def test_a_job_that_ends_as_its_rerun_looks_is_neither_submitted_again_nor_missed(tmp_path, points):
    # A killed sweep re-run while a point's job finishes: its run dir is judged finished after Slurm said the job
    # is gone, not before (judged before, a job ending in between was submitted again).
    from cifar_dist.config.schema import EpochPolicy
    from cifar_dist.launchers.slurm.launcher import SlurmLauncher
    from cifar_dist.launchers.slurm.monitor import record_job_id

    cfg = OmegaConf.create({"task": {"name": "train"}, "trainer": {"epochs": 3, "epoch_policy": EpochPolicy.shard}})
    specs = [JobSpec(cfg=cfg, output_dir=tmp_path / str(i), task_overrides=[], job_num=i) for i in range(points)]
    for spec in specs:
        spec.output_dir.mkdir()
        record_job_id(spec.output_dir, f"12_{spec.job_num}")
    launcher = SlurmLauncher(stream_output=False)
    launcher.client = EndsWhenAsked({f"12_{spec.job_num}": spec.output_dir for spec in specs})
    results = launcher.launch_all(specs)
    assert [(r.exit_code, r.metrics["complete"]) for r in results] == [(0, True)] * points


def test_following_a_job_compares_its_settings_not_why_engine_auto_chose_its_engine():
    """Once the job has written checkpoints, engine=auto says it keeps their engine: the same job, followed."""
    from cifar_dist.launchers.slurm.follow import differences
    from helpers.cli import compose_cfg

    submitted = compose_cfg("launcher=slurm", "engine=horovod")
    submitted.engine.why = "Horovod is installed"
    followed = compose_cfg("launcher=slurm", "launcher.wait=true", "engine=horovod")
    followed.engine.why = "engine=auto: the run dir's checkpoints were trained on engine=horovod"
    assert differences(submitted, followed) == []
    followed.trainer.epochs = 3
    assert differences(submitted, followed) == [f"trainer.epochs (job: {submitted.trainer.epochs}, now: 3)"]
