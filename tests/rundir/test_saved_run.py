"""The README's re-run from a saved config, run as written (issue 31, new user 4): the saved config is enough to
re-run the experiment."""

import pytest
from omegaconf import OmegaConf

from helpers.cli import assert_ok, read_metrics, run_cli


@pytest.mark.parametrize(
    "relative",
    [True, pytest.param(False, marks=pytest.mark.slow)],  # (absolute: ~1 min, -m slow)
    ids=["relative", "absolute"],
)
def test_the_readmes_rerun_from_a_saved_config_works_and_logs_to_cifar_dist_log(trained_run, tmp_path, relative):
    run_dir, _ = trained_run
    again = tmp_path / "again"
    saved = f"{run_dir.name}/.hydra" if relative else str(run_dir / ".hydra")
    proc = run_cli(
        "--config-path",
        saved,
        "--config-name",
        "config",
        "trainer.epochs=1",
        f"hydra.run.dir={again}",
        cwd=run_dir.parent,
    )
    assert_ok(proc)
    m = read_metrics(again)
    assert m["complete"] and m["run"]["data"] == read_metrics(run_dir)["run"]["data"]
    assert (again / "cifar_dist.log").is_file() and not (again / "app.log").exists(), sorted(
        p.name for p in again.iterdir()
    )
    saved, rerun = (OmegaConf.load(d / ".hydra" / "config.yaml") for d in (run_dir, again))
    assert rerun.trainer.epochs == 1
    rerun.trainer.epochs = saved.trainer.epochs
    assert rerun == saved  # the run's own experiment: its recorded overrides (data=sample, seed 7), then ours
