"""Bit-for-bit resume: stopping after an epoch and resuming ends with exactly
the weights of a run that was never stopped (CPU, trainer.deterministic=true).

The input pipeline is stateless per (seed, epoch, step, rank) already; what
made the runs differ was dropout, whose random state lived on in the stopped
process only. ReseedEachEpoch restarts it from (seed, epoch) at every epoch.
"""

import subprocess

import pytest

from helpers.cli import assert_ok, read_metrics, run_cli, start_cli

COMMON = (
    "data=sample",
    "trainer.batch_size=128",
    "trainer.epochs=2",
    "trainer.deterministic=true",
    "trainer.plot=false",
    "trainer.tensorboard=false",
    "trainer.save_model=false",
    "trainer.verbose=0",
)


@pytest.mark.slow  # 1.5 min; resume stays in the default suite (test_train_e2e, test_slurm_e2e's requeue)
@pytest.mark.timeout(600)
def test_resumed_run_equals_the_uninterrupted_one_bit_for_bit(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    # The uninterrupted run and the first (stopped) half side by side, then the resume.
    background = start_cli(*COMMON, f"hydra.run.dir={straight}", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for overrides in ((f"hydra.run.dir={resumed}", "trainer.max_epochs_per_run=1"), (f"hydra.run.dir={resumed}",)):
            proc = run_cli(*COMMON, *overrides, timeout=500)
            assert_ok(proc)
        _, err = background.communicate(timeout=500)
        assert_ok(background, err)
    finally:
        background.kill()

    a, b = read_metrics(straight), read_metrics(resumed)
    assert b["resumed_from_epoch"] == 1 and a["complete"] and b["complete"]
    # Same losses to the last bit in every epoch, same final weights (sha256 of every array).
    assert [e["loss"] for e in b["epochs"]] == [e["loss"] for e in a["epochs"]]
    assert b["rank_weight_digests"] == a["rank_weight_digests"]
    assert b["test"] == a["test"]
