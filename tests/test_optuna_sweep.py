"""An optimising sweep over distributed trials: Optuna asks for 2 trials at a time,
the sweep launcher runs both in one mpirun (launcher.concurrent=2, each its own
Horovod world), and Optuna learns every trial's test accuracy."""
import importlib.util
import re
import shutil

import pytest
from omegaconf import OmegaConf

from conftest import read_metrics, run_cli


@pytest.mark.mpi
@pytest.mark.timeout(2400)  # two mpiruns one after another: ~4 min on a quiet 2-core machine, far more when shared
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
@pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None,
                    reason="hydra-optuna-sweeper not installed: pip install 'cifar_dist[optuna]'")
def test_optuna_receives_every_trial_accuracy(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli(
        "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.direction=maximize", "hydra.sweeper.sampler.seed=3",
        "optimizer.lr=tag(log, interval(1e-4, 1e-2))",
        "launcher=mpirun", "launcher.np=1", "launcher.concurrent=2", "data=sample", "trainer.epochs=2",
        # small and quick: one pass over each rank's shard per epoch, no plots or TensorBoard
        "trainer.epoch_policy=shard", "trainer.batch_size=128", "trainer.plot=false", "trainer.tensorboard=false",
        "trainer.verbose=0", f"hydra.sweep.dir={sweep}", timeout=2100)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
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
