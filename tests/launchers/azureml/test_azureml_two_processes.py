"""An Azure ML MPI job of two processes on one node with ``engine=tensorflow``: each process trains on
TensorFlow's kernels, its gradients averaged over MPI (mpi4py, which the job's image carries), against the
local Azure ML double, whose node starts the ranks under this machine's mpirun as Azure ML's MPI distribution
does (issue 48). engine=auto picks Horovod there: the job's image is the horovod stack's (choice.py); this is
the engine a user names to train without it. It runs in the current stack's pass, where no Horovod could
average by mistake."""

from __future__ import annotations

import json

import pytest

from helpers.cli import assert_ok, run_cli
from helpers.fake_azureml.fixtures import aml_env, aml_overrides
from helpers.fake_azureml.small_data import small_data
from helpers.no_horovod import ONCE_ON_THE_CURRENT_STACK

pytestmark = [pytest.mark.mpi, pytest.mark.both_stacks, ONCE_ON_THE_CURRENT_STACK]


def test_two_processes_per_node_train_on_tensorflow_in_sync(fake_aml, snapshot_cache, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        *aml_overrides(
            fake_aml,
            run_dir,
            snapshot_cache,
            **small_data(tmp_path),
            # (trainer.epoch_policy=divide, the seed's: 4 epochs over 2 processes are 2 epochs of the whole set)
            **{"engine": "tensorflow", "launcher.process_count_per_instance": 2, "trainer.epochs": 4},
        ),
        env=aml_env(fake_aml),
        cwd=tmp_path,
        timeout=400,
    )
    assert_ok(proc)

    (create,) = fake_aml.job_creates()
    assert json.loads(create.body)["properties"]["distribution"] == {
        "distributionType": "Mpi",
        "processCountPerInstance": 2,
    }
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["complete"] is True and metrics["run"]["epochs"] == 2
    assert metrics["run"]["engine"] == "tensorflow" and metrics["ranks"] == 2
    assert metrics["ranks_in_sync"] is True  # the two processes' weights equal after training: gradients averaged
    assert (run_dir / "checkpoints" / "checkpoint-002.h5").is_file()  # rank 0's, brought home
    assert sorted(p.name for p in (run_dir / "logs").glob("rank.*.log")) == ["rank.0.log", "rank.1.log"]
    assert "Test accuracy" in (run_dir / "azureml" / "std_log.txt").read_text()
