"""A user's own model, data and config dir, from a directory outside the checkout, trained where the
launchers run it: 2 ranks under mpirun, 2 ranks on the real single-node Slurm, one Azure ML job on
the local double (issue 22, "carried everywhere"). Under mpirun the run is then resumed: one launch per
launcher shows what it carries to the ranks, and the resume, a second launch of the same command carried
the same way, is done once. Scoring a user's model from their folder (a local run, whatever trained it):
tests/e2e/test_own_model_readme.py; a model trained on 2 ranks from a user's factory, scored as training
reported: tests/e2e/test_data_own_e2e.py.

The project is tests/helpers/user_project.py's: ``mymodels.build`` (a conv layer named ``mine_conv``),
``mydata.make`` (the packaged sample's first 256/128 images as a tf.data factory) and
``myconf/{model/tiny,data/mine}.yaml``, run as ``python -m cifar_dist --config-dir myconf model=tiny
data=mine`` with the project folder as the working directory and NOT on the launching PYTHONPATH:
whatever the ranks find, the launch carried to them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.cli import assert_ok, cli_env, run_cli
from helpers.fake_azureml.fixtures import aml_env, aml_overrides
from helpers.slurm_cluster import missing_packages
from helpers.user_project import (
    QUIET,
    USER_ARGS,
    WIDTH,
    assert_trained_the_users_model,
    needs_mpirun,
    write_user_project,
)

no_slurm = pytest.mark.skipif(
    bool(missing_packages()) or os.geteuid() != 0,
    reason="needs Slurm installed (scripts/install.sh as root) and root (SlurmUser=root)",
)
TWO_RANKS = ("trainer.epoch_policy=shard",)


@pytest.fixture
def project(tmp_path) -> Path:
    return write_user_project(tmp_path / "project")


def train(project: Path, run_dir: Path, epochs: int, *launch: str, env=None):
    """The user's command, from their folder: ``--config-dir myconf model=tiny data=mine`` + a launcher."""
    return assert_ok(
        run_cli(
            *USER_ARGS,
            f"model.width={WIDTH}",
            *QUIET,
            f"trainer.epochs={epochs}",
            *launch,
            f"hydra.run.dir={run_dir}",
            cwd=project,
            env=env or cli_env(),
            timeout=900,
        )
    )


def resume(project: Path, run_dir: Path, ranks: int, *launch: str) -> None:
    """Grow the run to 2 epochs: the same command with trainer.epochs=2 resumes after epoch 1."""
    train(project, run_dir, 2, *launch)
    log = (run_dir / "logs" / "rank.0.log").read_text() if (run_dir / "logs").is_dir() else ""
    log += (run_dir / "cifar_dist.log").read_text()
    assert "resuming after epoch 1 from" in log
    assert_trained_the_users_model(run_dir, ranks, 2)
    assert len((run_dir / "training_log.csv").read_text().strip().splitlines()) == 1 + 2  # header, epochs 1 and 2


@needs_mpirun
@pytest.mark.horovod  # two ranks of a Keras 2 model
def test_two_mpirun_ranks_train_and_resume_the_users_project(project, tmp_path):
    run_dir = tmp_path / "runs" / "mpirun"
    launch = ("launcher=mpirun", "launcher.np=2", *TWO_RANKS)
    train(project, run_dir, 1, *launch)
    assert_trained_the_users_model(run_dir, 2, 1)
    resume(project, run_dir, 2, *launch)


@pytest.mark.mpi
@pytest.mark.horovod
@no_slurm
def test_two_slurm_ranks_train_the_users_project(slurm, project, tmp_path):
    env = cli_env(SLURM_CONF=slurm.env["SLURM_CONF"], TF_CPP_MIN_LOG_LEVEL="2")
    run_dir = tmp_path / "runs" / "slurm"
    launch = ("launcher=slurm", "launcher.ntasks_per_node=2", "launcher.poll_interval_s=1", *TWO_RANKS)
    try:
        train(project, run_dir, 1, *launch, env=env)
        assert_trained_the_users_model(run_dir, 2, 1)
    finally:
        slurm.cancel_all()


@pytest.mark.horovod  # Azure ML jobs train on Horovod (its image has it); the double runs them in this venv
def test_an_azureml_job_trains_the_users_project_from_its_snapshot(project, fake_aml, snapshot_cache, tmp_path):
    """The local double runs the job's command from the uploaded code, with the job's own environment and
    no PYTHONPATH of this machine: only what the snapshot holds can be imported."""
    run_dir = tmp_path / "runs" / "azureml"
    args = [a for a in aml_overrides(fake_aml, run_dir, snapshot_cache) if not a.startswith(("data=", "trainer."))]
    assert_ok(
        run_cli(
            *USER_ARGS,
            f"model.width={WIDTH}",
            *QUIET,
            "trainer.epochs=1",
            *args,
            cwd=project,
            env=aml_env(fake_aml),
            timeout=600,
        )
    )
    assert_trained_the_users_model(run_dir, 1, 1)
