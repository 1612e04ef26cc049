"""A misspelt option or key is refused in one line naming the nearest known name,
before Hydra composes, creates a run dir or loads any data (cifar_dist/config/override_check.py)."""

import pytest

from cifar_dist.all_options import register_configs
from cifar_dist.common.errors import did_you_mean
from cifar_dist.config.override_check import command_line_problem
from helpers.cli import run_cli

register_configs()


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["+trainer.epocs=3"], "trainer has no key `epocs`; did you mean `epochs`?"),
        (["++trainer.epocs=3"], "did you mean `epochs`?"),
        (["trainer.epocs=3"], "trainer has no key `epocs`; did you mean `epochs`?"),
        (["+data.augment.cutot=2"], "data.augment has no key `cutot`; did you mean `cutout`?"),
        (["launcher=mpirun", "+launcher.npp=2"], "launcher has no key `npp`; did you mean `np`?"),
        (["optimizer=adam", "+optimizer.bet_1=0.8"], "did you mean `beta_1`?"),
        (["model=airbench", "model.widht=8"], "model has no key `widht`; did you mean `widths`?"),
        (["+tracking.experimnt=x"], "did you mean `experiment`?"),
        (["task=evaluate", "+evaluate.modle=x"], "evaluate has no key `modle`; did you mean `model`?"),
        (["launcher=mpiru"], "launcher has no option `mpiru`; did you mean `mpirun`?"),
        (["launcher=mpirun_schema"], "launcher has no option `mpirun_schema`; did you mean `mpirun`?"),
        (["-m", "launcher=mpirun,slurmm"], "launcher has no option `slurmm`; did you mean `slurm`?"),
        (["-m", "optimizer.lr=1e-4,2e-4", "+trainer.epocs=3"], "did you mean `epochs`?"),
        (["experiment=fastt"], "experiment has no option `fastt`; did you mean `fast`?"),
    ],
)
def test_a_misspelt_name_is_refused_with_the_nearest_one(argv, hint):
    problem = command_line_problem(argv)
    assert problem is not None and hint in problem
    assert "\n" not in problem


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["trainer.epochs=3"],
        ["experiment=fast"],
        ["~experiment"],
        ["data=sample", "debug=fast"],
        ["launcher=mpirun", "launcher.np=4"],
        ["launcher=mpirun", "+launcher.env.MY_VAR=1"],  # a Dict field: any key
        ["-m", "optimizer.lr=1e-4,2e-4"],
        ["-m", "launcher=mpirun,slurm", "launcher.np=2"],
        ["task=evaluate", "evaluate.model=somewhere"],
        ["hydra.run.dir=somewhere", "hydra.verbose=true"],
    ],
)
def test_what_names_something_passes(argv):
    assert command_line_problem(argv) is None


def test_did_you_mean_stays_quiet_when_nothing_is_near():
    assert did_you_mean("zzz", ["epochs", "batch_size"]) == ""


# A dry run, so that a regression that lets the typo pass costs a second, not a training run.
@pytest.mark.parametrize(
    "overrides, hint",
    [
        (["+trainer.epocs=3", "launcher=mpirun", "launcher.dry_run=true"], "did you mean `epochs`?"),
        (["launcher=mpiru", "launcher.dry_run=true"], "did you mean `mpirun`?"),
    ],
)
def test_the_cli_refuses_in_one_line_and_writes_nothing(tmp_path, overrides, hint):
    proc = run_cli(*overrides, "data=sample", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cifar_dist: error: ") and hint in lines[0], proc.stderr
    assert list(tmp_path.iterdir()) == []  # no outputs/, no run dir
