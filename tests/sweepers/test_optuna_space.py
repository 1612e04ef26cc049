"""The Optuna sweeper's search space (Hydra's override syntax -> Optuna's distributions) and its study's name."""

import importlib.util

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from cifar_dist.common.sweep_errors import SweepRefused
from cifar_dist.sweepers.optuna_space import params_lines, search_space
from cifar_dist.sweepers.optuna_study import study_name

pytestmark = [
    pytest.mark.both_stacks,
    pytest.mark.skipif(importlib.util.find_spec("optuna") is None, reason="Optuna not installed"),
]


def test_each_sweep_becomes_its_distribution_and_the_rest_is_passed_as_typed():
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    space = search_space(
        [
            "optimizer.lr=tag(log, interval(1e-4, 1e-2))",
            "optimizer.momentum=interval(0.8, 0.99)",
            "trainer.batch_size=range(64, 256, 64)",
            "+trainer.warmup=int(interval(1, 5))",
            "model=choice(resnet20,vgg11)",
            "trainer.epochs=1",
            "~trainer.tta",
        ]
    )
    assert space.distributions == {
        "optimizer.lr": FloatDistribution(1e-4, 1e-2, log=True),
        "optimizer.momentum": FloatDistribution(0.8, 0.99),
        "trainer.batch_size": IntDistribution(64, 256, step=64),  # both ends, as hydra-optuna-sweeper did
        "+trainer.warmup": IntDistribution(1, 5),
        "model": CategoricalDistribution(["resnet20", "vgg11"]),
    }
    assert space.fixed == ["trainer.epochs=1", "~trainer.tta"]


def test_a_trials_overrides_parse_back_to_its_values():
    space = search_space(["optimizer.lr=tag(log, interval(1e-6, 1e-2))", "+trainer.warmup=int(interval(1, 5))", "a=1"])
    params = {"optimizer.lr": 1.2345678901234567e-05, "+trainer.warmup": 3}
    parsed = OverridesParser.create().parse_overrides(space.overrides(params))
    assert [(o.get_key_element(), o.value()) for o in parsed] == [*params.items(), ("a", 1)]


def test_the_command_line_wins_over_hydra_sweeper_params():
    lines = params_lines({"optimizer.lr": "interval(0.01, 0.1)", "trainer.epochs": "choice(1, 2)"})
    space = search_space(lines + ["optimizer.lr=0.05", "trainer.epochs=range(1, 4)"])
    assert list(space.distributions) == ["trainer.epochs"] and space.fixed == ["optimizer.lr=0.05"]


def test_a_grid_lists_both_ends_and_refuses_an_interval_in_one_line():
    assert search_space(["a=range(2, 8, 2)", "b=choice(x, y)", "c=range(0.5, 1.5, 0.5)"]).grid() == {
        "a": [2, 4, 6, 8],
        "b": ["x", "y"],
        "c": [0.5, 1.0, 1.5],
    }
    with pytest.raises(SweepRefused, match=r"^lr: hydra/sweeper/sampler=grid needs .*not an interval$"):
        search_space(["lr=interval(0.1, 1)"]).grid()


def test_a_glob_choice_is_refused_in_one_line():
    with pytest.raises(SweepRefused, match=r"^model=glob\(\*\): the Optuna sweeper takes choice\(\), range\(\)"):
        search_space(["model=glob(*)"])


def test_the_same_search_finds_the_same_study_whatever_the_order():
    search = ["optimizer.lr=interval(0.01, 0.1)", "data=sample"]
    name = study_name(None, search, ["maximize"])
    assert name.startswith("cifar_dist-") and name == study_name(None, list(reversed(search)), ["maximize"])
    assert study_name(None, search, ["minimize"]) != name
    assert study_name(None, search + ["trainer.epochs=2"], ["maximize"]) != name
    assert study_name("lr", search, ["maximize"]) == "lr"


@pytest.mark.parametrize(
    "line, says",
    [
        (
            "optimizer.lr=interval(1e-2, 1e-4)",
            "it starts above its end, so it holds no value; write interval(0.0001, 0.01)",
        ),
        (
            "optimizer.lr=tag(log, interval(0, 1))",
            "a log scale needs a low end above 0 (not 0.0); e.g. interval(1e-5, 1.0)",
        ),
        ("trainer.epochs=range(1,0)", "it starts above its end, so it holds no value; write range(0, 1)"),
        ("trainer.epochs=range(5, 1, -1)", "Optuna draws a range upwards; write range(1, 5, 1)"),
        ("trainer.epochs=range(1, 5, 0)", "a step of 0 never moves; give a step above 0, e.g. range(1, 5, 1)"),
        ("optimizer.lr=interval(nan, 1)", "its bounds must be finite numbers (not nan or inf)"),
        ("optimizer.lr=interval(0, inf)", "its bounds must be finite numbers (not nan or inf)"),
        ("trainer.epochs=range(0, inf)", "its bounds must be finite numbers (not nan or inf)"),
        ("optimizer.lr=range(0.0, 1.0, nan)", "its bounds must be finite numbers (not nan or inf)"),
        ("trainer.epochs=shuffle(range(1, 0))", "Optuna cannot draw from it (The `choices` must contain one or more"),
    ],
)
def test_impossible_bounds_are_one_line_naming_the_override(line, says):
    """Issue 57 item 9: Optuna's (or Hydra's decimal) tracebacks of 22-47 lines; nan and inf were taken, and the
    sweep ran trials with them. The sweeper reads the space before it writes anything (the CLI test below)."""
    with pytest.raises(SweepRefused) as refused:
        search_space([line])
    assert str(refused.value).startswith(f"{line}: {says}") and "\n" not in str(refused.value)
