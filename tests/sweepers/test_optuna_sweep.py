"""An optimising sweep over distributed trials: Optuna asks for 2 trials at a time,
the sweep launcher runs both in one mpirun (launcher.concurrent=2, each its own
Horovod world), and Optuna learns every trial's test accuracy."""

import importlib.util
import re
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.cli import assert_ok, read_metrics, run_cli, tiny_cifar


@pytest.mark.mpi
@pytest.mark.horovod
@pytest.mark.timeout(2400)  # two mpiruns one after another: ~2 min on a quiet 2-core machine, far more when shared
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None,
    reason="hydra-optuna-sweeper not installed: pip install 'cifar_dist[optuna]'",
)
def test_optuna_receives_every_trial_accuracy(tiny_data, tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli(
        "-m",
        "hydra/sweeper=optuna",
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
    # Optuna's best is the best of the four accuracies: it received every one of them.
    assert results.best_value == pytest.approx(max(accuracies))


# --- the sweeper's own behaviour, with a fake launcher (helpers/sweep_fakes.py: accuracy = 10 x lr, lr >= 0.5 fails)

needs_optuna = pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None,
    reason="hydra-optuna-sweeper not installed: pip install 'cifar_dist[optuna]'",
)


def fake_optuna_sweep(sweep, *overrides):
    import os

    from helpers.cli import cli_env

    tests = str(Path(__file__).resolve().parents[1])
    env = cli_env(PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), tests])))
    return run_cli(
        "-m",
        "hydra/sweeper=optuna",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.sampler.seed=3",
        "launcher._target_=helpers.sweep_fakes.RecordingLauncher",
        "data=sample",
        f"hydra.sweep.dir={sweep}",
        *overrides,
        env=env,
        timeout=300,
    )


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
