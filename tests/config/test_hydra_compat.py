"""Hydra's argument parser on Python 3.14 (cifar_dist/config/hydra_compat.py): argparse's eager help check
refuses Hydra 1.3.8's lazy ``--shell-completion`` help, so every run failed before it parsed its command line.
On older Pythons the check is replayed here as 3.14 has it."""

import argparse

import pytest
from hydra._internal.utils import get_args_parser

from cifar_dist.config.hydra_compat import let_hydra_parse_on_python_314

pytestmark = pytest.mark.jax_stack  # the jax stack is the one Python 3.14 gets (scripts/install_stack.py)


def check_help_as_on_python_314(self, action):
    """What Python 3.14's ``ArgumentParser._check_help`` does: expand the help, or refuse it."""
    if action.help:
        try:
            if "%" in action.help:
                action.help % dict(vars(action), prog=self.prog)
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError("badly formed help string") from exc


@pytest.fixture
def python_314_help_check(monkeypatch):
    """The running argparse's own check where it has one (3.14), else the replayed one; put back afterwards."""
    check = getattr(argparse.ArgumentParser, "_check_help", check_help_as_on_python_314)
    monkeypatch.setattr(argparse.ArgumentParser, "_check_help", check, raising=False)
    add_argument = argparse.ArgumentParser.add_argument

    def add_and_check(self, *args, **kwargs):  # 3.11-3.13's add_argument never calls the check
        action = add_argument(self, *args, **kwargs)
        self._check_help(action)
        return action

    if not hasattr(argparse.ArgumentParser, "_get_validation_formatter"):
        monkeypatch.setattr(argparse.ArgumentParser, "add_argument", add_and_check)


def test_hydras_parser_is_refused_by_the_check_alone(python_314_help_check):
    with pytest.raises(ValueError, match="badly formed help string"):
        get_args_parser()


def test_hydras_parser_parses_with_the_fix_and_a_bad_help_string_is_still_refused(python_314_help_check):
    let_hydra_parse_on_python_314()
    let_hydra_parse_on_python_314()  # idempotent: one wrapper, not two
    args = get_args_parser().parse_args(["-m", "trainer.epochs=2"])
    assert args.multirun and args.overrides == ["trainer.epochs=2"]
    parser = argparse.ArgumentParser()
    with pytest.raises(ValueError, match="badly formed help string"):
        parser.add_argument("--x", help="%(no_such_key)s")
