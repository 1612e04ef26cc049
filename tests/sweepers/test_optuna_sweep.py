"""An optimising sweep over distributed trials: Optuna asks for 2 trials at a time,
the sweep launcher runs both in one mpirun (launcher.concurrent=2, each its own
Horovod world), and Optuna learns every trial's test accuracy."""

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess

import pytest
from omegaconf import OmegaConf

from helpers.cli import assert_ok, read_metrics, run_cli, start_cli, tiny_cifar, wait_for
from helpers.sweep_fakes import HANG_AT_JOB, fake_sweep_env


@pytest.mark.mpi
@pytest.mark.horovod
@pytest.mark.timeout(2400)  # two mpiruns one after another: ~2 min on a quiet 2-core machine, far more when shared
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
@pytest.mark.skipif(
    importlib.util.find_spec("optuna") is None, reason="Optuna not installed: pip install 'cifar_dist[optuna]'"
)
def test_optuna_receives_every_trial_accuracy(tiny_data, tmp_path):
    import optuna

    sweep = tmp_path / "sweep"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    proc = run_cli(
        "-m",
        "hydra/sweeper=optuna",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.direction=maximize",
        "hydra.sweeper.sampler.seed=3",
        "optimizer.lr=tag(log, interval(1e-4, 1e-2))",
        "launcher=mpirun",
        "launcher.np=1",
        "launcher.concurrent=2",
        # one epoch of tiny data: what is asserted (4 trials in 2 mpiruns, each trial's accuracy reaching Optuna)
        # needs neither a second epoch nor more images
        *tiny_cifar(tiny_data),
        "trainer.epochs=1",
        # small and quick: one pass over each rank's shard per epoch, no plots or TensorBoard
        "trainer.epoch_policy=shard",
        "trainer.batch_size=128",
        "trainer.plot=false",
        "trainer.tensorboard=false",
        "trainer.verbose=0",
        f"hydra.sweep.dir={sweep}",
        timeout=2100,
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    # Two trials per mpirun, each its own MPI group: 4 trials in 2 mpiruns.
    assert re.findall(r"points (#\d, #\d) in one mpirun, 2 group\(s\) of 1 rank\(s\)", out) == ["#0, #1", "#2, #3"]

    accuracies = []
    for num in range(4):
        metrics = read_metrics(sweep / str(num))
        assert metrics["complete"] and metrics["ranks"] == 1
        accuracies.append(metrics["test"]["accuracy"])
    results = OmegaConf.load(sweep / "optimization_results.yaml")
    assert results.name == "optuna"
    assert 1e-4 <= results.best_params["optimizer.lr"] <= 1e-2
    # Optuna's best is the best of the four accuracies: it received every one of them, and its SQLite study
    # holds trial N as the accuracy of point N.
    assert results.best_value == pytest.approx(max(accuracies))
    study = optuna.load_study(study_name=None, storage=storage)
    assert [t.value for t in study.trials] == pytest.approx(accuracies)


# --- the sweeper's own behaviour, with a fake launcher (helpers/sweep_fakes.py: accuracy = 10 x lr, lr >= 0.5 fails)

needs_optuna = pytest.mark.skipif(
    importlib.util.find_spec("optuna") is None, reason="Optuna not installed: pip install 'cifar_dist[optuna]'"
)


FAKE_SWEEP = (
    "-m",
    "hydra/sweeper=optuna",
    "hydra.sweeper.n_jobs=2",
    "hydra.sweeper.sampler.seed=3",
    "launcher._target_=helpers.sweep_fakes.RecordingLauncher",
    "data=sample",
)


def fake_optuna_sweep(sweep, *overrides):
    return run_cli(*FAKE_SWEEP, f"hydra.sweep.dir={sweep}", *overrides, env=fake_sweep_env(), timeout=300)


def launches(sweep) -> list:
    """The job numbers of each launch_all call the fake launcher received, in order."""
    return [json.loads(line)["jobs"] for line in (sweep / "launch_all.jsonl").read_text().splitlines()]


def kill_sweep_at_trial(sweep, trial: int, *command) -> None:
    """Start the fake Optuna sweep into ``sweep`` and kill -9 its whole session once trial #``trial`` has started
    (and hangs there): a machine that dies mid-sweep."""
    killed = start_cli(
        *FAKE_SWEEP,
        f"hydra.sweep.dir={sweep}",
        *command,
        env=fake_sweep_env(**{HANG_AT_JOB: str(trial)}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        new_session=True,
    )
    try:
        wait_for(lambda: (sweep / str(trial) / "hanging").exists(), 240, proc=killed, what=f"trial #{trial} to start")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()


@needs_optuna
def test_optuna_maximises_the_accuracy_by_default_and_warns_on_minimize(tmp_path):
    proc = fake_optuna_sweep(tmp_path / "max", "hydra.sweeper.n_trials=4", "optimizer.lr=choice(0.01,0.02,0.04)")
    assert_ok(proc)
    results = OmegaConf.load(tmp_path / "max" / "optimization_results.yaml")
    assert results.best_params["optimizer.lr"] == 0.04 and results.best_value == pytest.approx(0.4)
    assert "direction=minimize" not in proc.stdout + proc.stderr

    proc = fake_optuna_sweep(
        tmp_path / "min",
        "hydra.sweeper.n_trials=2",
        "optimizer.lr=choice(0.01,0.02)",
        "hydra.sweeper.direction=minimize",
    )
    assert_ok(proc)
    warnings = [line for line in (proc.stdout + proc.stderr).splitlines() if "hydra.sweeper.direction=minimize" in line]
    assert len(warnings) == 1 and "maximize" in warnings[0]


@needs_optuna
def test_a_failed_trial_is_printed_once_and_the_study_keeps_its_results(tmp_path):
    # Within hydra.sweeper.max_failure_rate: the study goes on, the failed trial is FAILED, the best is kept.
    proc = fake_optuna_sweep(
        tmp_path / "within",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.max_failure_rate=0.5",
        "optimizer.lr=choice(0.01,0.02,0.9)",
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    results = OmegaConf.load(tmp_path / "within" / "optimization_results.yaml")
    assert results.best_params["optimizer.lr"] == 0.02
    failed = [d for d in (tmp_path / "within").iterdir() if d.name.isdigit() and not (d / "metrics.json").exists()]
    assert failed and out.count("lr 0.9 too high") == len(failed), out[-3000:]  # one line per failed trial
    assert "Error executing job" not in out

    # Beyond it (the default 0.0): the study stops in one line naming the setting, the good trials' best is kept.
    proc = fake_optuna_sweep(tmp_path / "beyond", "hydra.sweeper.n_trials=4", "optimizer.lr=choice(0.01,0.02,0.9)")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert out.count("lr 0.9 too high") == 1 and "Error executing job" not in out, out[-3000:]
    stop = [line for line in out.splitlines() if "hydra.sweeper.max_failure_rate" in line]
    assert len(stop) == 1 and "optimization_results.yaml" in stop[0]
    results = OmegaConf.load(tmp_path / "beyond" / "optimization_results.yaml")
    assert results.best_params["optimizer.lr"] == 0.02 and results.failed_trials == [1]


@needs_optuna
@pytest.mark.both_stacks
def test_a_killed_sweep_run_again_continues_its_study(tmp_path):
    import optuna

    sweep = tmp_path / "sweep"
    storage = f"sqlite:///{tmp_path / 'studies' / 'lr.db'}"  # its folder does not exist yet
    command = ("hydra.sweeper.n_trials=6", f"hydra.sweeper.storage={storage}", "optimizer.lr=interval(0.01, 0.04)")
    # The machine dies in the second batch: trial #2 never returns, and the whole sweep is killed (kill -9).
    kill_sweep_at_trial(sweep, 2, *command)
    interrupted = {n: (sweep / str(n) / ".hydra" / "overrides.yaml").read_text() for n in (2, 3)}

    proc = fake_optuna_sweep(sweep, *command)  # the same command
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    assert "2 trial(s) finished (not run again), 2 interrupted (#2, #3: run again), 4 to run" in out, out[-3000:]
    # #0 and #1 finished before the kill and are not run again; #2 and #3 run again as themselves, with the
    # values they had (in their own run dirs); #4 and #5 are new: the study has its 6 trials.
    assert launches(sweep) == [[0, 1], [2, 3], [2, 3], [4, 5]]
    assert {n: (sweep / str(n) / ".hydra" / "overrides.yaml").read_text() for n in (2, 3)} == interrupted
    study = optuna.load_study(study_name=None, storage=storage)
    assert [(t.number, t.state.name) for t in study.trials] == [(n, "COMPLETE") for n in range(6)]
    for trial in study.trials:  # each trial's value is its own point's accuracy (10 x its lr)
        assert trial.value == pytest.approx(10 * trial.params["optimizer.lr"])
    results = OmegaConf.load(sweep / "optimization_results.yaml")
    assert results.best_value == pytest.approx(max(t.value for t in study.trials))


@needs_optuna
def test_a_second_sweep_dir_on_a_running_study_trains_and_tells_nothing_twice(tmp_path):
    """Issue 57 item 8: a second sweep on the study from another sweep dir took the first one's running trials for
    a killed sweep's: it trained trial #0 again, and the first sweep then crashed (``Cannot tell a COMPLETE
    trial``). Each trial now names its sweep dir: the second leaves the first's running trials to it, counts them,
    and numbers its own after them."""
    import optuna

    first, second = tmp_path / "first", tmp_path / "second"
    storage = f"sqlite:///{tmp_path / 'lr.db'}"
    command = (f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=lr", "optimizer.lr=interval(0.01, 0.04)")
    running = start_cli(  # trial #1 is slow: the study holds #0 and #1 RUNNING while the second sweep starts
        *FAKE_SWEEP,
        f"hydra.sweep.dir={first}",
        "hydra.sweeper.n_trials=2",
        *command,
        env=fake_sweep_env(**{HANG_AT_JOB: "1"}),
    )
    try:
        wait_for(lambda: (first / "1" / "hanging").exists(), 240, proc=running, what="trial #1 to start")
        proc = fake_optuna_sweep(second, "hydra.sweeper.n_trials=4", *command)
        (first / "1" / "release").touch()
        out, _ = running.communicate(timeout=240)
    finally:
        running.kill()
    assert running.returncode == 0, out[-3000:]
    assert_ok(proc)
    assert f"2 trial(s) of the study run now in another sweep dir (#0, #1 in {first})" in proc.stdout + proc.stderr
    assert launches(first) == [[0, 1]] and launches(second) == [[2, 3]]  # nothing trained twice
    study = optuna.load_study(study_name="lr", storage=storage)
    assert [(t.number, t.state.name) for t in study.trials] == [(n, "COMPLETE") for n in range(4)]
    owners = [t.user_attrs["cifar_dist_sweep_dir"] for t in study.trials]
    assert owners == [str(first)] * 2 + [str(second)] * 2
    for trial in study.trials:  # each told once, by its own sweep: its own point's accuracy (10 x its lr)
        assert trial.value == pytest.approx(10 * trial.params["optimizer.lr"])


@needs_optuna
def test_a_killed_sweeps_running_trials_are_run_again_from_another_sweep_dir(tmp_path):
    """The default hydra.sweep.dir has the time in it: the same command run again after a kill -9 is another sweep
    dir. Nobody holds the killed sweep's points any more, so its running trials are run again there, as
    themselves, and told once."""
    import optuna

    first, second = tmp_path / "first", tmp_path / "second"
    storage = f"sqlite:///{tmp_path / 'lr.db'}"
    command = (f"hydra.sweeper.storage={storage}", "hydra.sweeper.n_trials=2", "optimizer.lr=interval(0.01, 0.04)")
    kill_sweep_at_trial(first, 1, *command)
    proc = fake_optuna_sweep(second, *command)
    assert_ok(proc)
    assert "2 interrupted (#0, #1: run again)" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert launches(second) == [[0, 1]]
    study = optuna.load_study(study_name=None, storage=storage)
    assert [(t.number, t.state.name) for t in study.trials] == [(0, "COMPLETE"), (1, "COMPLETE")]
    assert {t.user_attrs["cifar_dist_sweep_dir"] for t in study.trials} == {str(second)}  # taken over: marked


@needs_optuna
def test_a_trial_another_sweep_finished_meanwhile_is_not_told_again(caplog):
    """The last guard against telling twice: a trial told by another sweep between its point's end and this sweep's
    tell (``Cannot tell a COMPLETE trial`` ended the sweep) is left as told, in one warning line."""
    import optuna
    from hydra.core.utils import JobReturn, JobStatus

    from cifar_dist.sweepers.optuna import OptunaSweeper

    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    study.tell(trial, 0.5)  # by the other sweep
    ret = JobReturn(status=JobStatus.COMPLETED)
    ret.return_value = 0.7
    sweeper = OptunaSweeper(None, "maximize", None, None, 1, 1, 0.0, None, None)
    assert sweeper.record(study, trial, ret) is False
    assert study.trials[0].value == 0.5
    assert "trial #0 was finished by another sweep of the study meanwhile: not told again" in caplog.text


@needs_optuna
def test_a_nan_bound_is_one_line_and_leaves_no_sweep_dir(tmp_path):
    """Issue 57 item 9: ``interval(nan, 1)`` was taken, its trials ran and left a sweep dir."""
    sweep = tmp_path / "sweep"
    proc = fake_optuna_sweep(sweep, "optimizer.lr=interval(nan, 1)")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if "interval(nan, 1)" in line]
    assert lines == [
        "optimizer.lr=interval(nan, 1): its bounds must be finite numbers (not nan or inf); give numbers such as 1e-4"
    ], out[-3000:]
    assert not sweep.exists()


@needs_optuna
def test_a_storage_optuna_cannot_open_is_one_line_before_any_trial(tmp_path):
    sweep = tmp_path / "sweep"
    proc = fake_optuna_sweep(
        sweep, "hydra.sweeper.storage=postgresql://bob:s3cret@localhost/optuna", "optimizer.lr=choice(0.01,0.02)"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if "hydra.sweeper.storage=" in line]
    assert len(lines) == 1 and "sqlite:///" in lines[0], out[-3000:]
    assert "s3cret" not in out
    assert not (sweep / "launch_all.jsonl").exists()
