"""The resume policy: a re-run only ever continues the same experiment.

A re-run with another optimizer, lr, batch size or augmentation is refused
in one line listing the differences, and ``.hydra/`` keeps describing the
run that wrote the files (Hydra used to overwrite it before refusing).
A finished run whose checkpoints are gone, and a damaged metrics.json on
resume: tests/rundir/test_rundir_lock.py (those tests also take the lock).
"""

from pathlib import Path

import pytest

from cifar_dist.rundir.lock import LOCK_NAME
from helpers.cli import error_lines, run_cli

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)


def snapshot(run_dir: Path) -> dict:
    return {
        str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != LOCK_NAME
    }


def test_a_rerun_with_other_settings_is_refused_and_hydra_keeps_describing_the_run(half_run, quiet_tiny_run):
    before = snapshot(half_run)
    proc = run_cli(
        *quiet_tiny_run,
        "trainer.epochs=2",
        "optimizer=sgd",
        "trainer.batch_size=32",
        "data.augment.enabled=false",
        f"hydra.run.dir={half_run}",
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    for changed in (
        "optimizer._target_",
        "optimizer.lr",
        "trainer.batch_size (was 64, now 32)",
        "data.augment.enabled (was True, now False)",
    ):
        assert changed in line
    assert snapshot(half_run) == before  # .hydra/config.yaml, overrides.yaml, the log: untouched

    lr_only = run_cli(
        *quiet_tiny_run, "trainer.batch_size=64", "optimizer.lr=0.001", f"hydra.run.dir={half_run}", timeout=120
    )
    assert lr_only.returncode == 2 and "optimizer.lr (was 0.0001, now 0.001)" in error_lines(lr_only)[0]
    assert snapshot(half_run) == before


def test_the_engine_is_fixed_and_a_config_saved_before_engines_counts_as_horovod_keras_2():
    """A run's checkpoints are of one Keras (issue 29): engine.keras may not change on resume; a run dir saved
    before the engine group existed trained on Horovod with Keras 2 and resumes with the defaults unrefused."""
    from omegaconf import OmegaConf

    from cifar_dist.rundir.resume_policy import differences

    base = {"data": {"name": "sample"}, "model": {}, "optimizer": {}, "trainer": {}}
    old = OmegaConf.create(base)
    default = OmegaConf.create({**base, "engine": {"name": "horovod", "keras": 2}})
    keras3 = OmegaConf.create({**base, "engine": {"name": "horovod", "keras": 3}})
    assert differences(old, default) == []
    assert differences(default, keras3) == ["engine.keras (was 2, now 3)"]
    # Issue 37, item 13: another engine is named alone, not the Keras it brings, which the user may never have set.
    jax = OmegaConf.create({**base, "engine": {"name": "jax", "keras": 3}})
    assert differences(jax, default) == ["engine.name (was jax, now horovod)"]


def test_the_readme_names_the_engine_among_what_a_resume_keeps():
    """Issue 37, item 13: the README said every other group may change, not that the engine may not."""
    from helpers.paths import REPO

    section = (REPO / "README.md").read_text("utf-8").split("### Resume", 1)[1].split("\n## ", 1)[0]
    assert (
        "and the engine (`engine=horovod|tensorflow|jax`" in section and "every other group but the engine" in section
    )
