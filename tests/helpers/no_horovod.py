"""A command's environment in which a package is not installed (Horovod, as on the current stack; TensorFlow, as
on the jax stack), made on the horovod stack."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from helpers.cli import cli_env


def env_without(site: Path, *packages: str) -> dict:
    """``cli_env()`` with a ``sitecustomize`` in ``site`` that marks ``packages`` missing, as uninstalled ones are
    (importlib finds no spec; their metadata stays: what ``import`` sees decides)."""
    marks = "".join(f"sys.modules[{name!r}] = None  # what importlib reads as 'not installed'\n" for name in packages)
    (site / "sitecustomize.py").write_text("import sys\n" + marks)
    env = cli_env()
    env["PYTHONPATH"] = str(site) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def env_without_horovod(site: Path) -> dict:
    return env_without(site, "horovod")


NOT_ON_THE_JAX_STACK = ("tensorflow", "tf_keras", "horovod")  # (tf-keras and Horovod need TensorFlow)


def env_without_tensorflow(site: Path) -> dict:
    """No TensorFlow, tf-keras or Horovod: a jax-stack process, made on the horovod stack."""
    return env_without(site, *NOT_ON_THE_JAX_STACK)


def as_the_jax_stack(monkeypatch) -> None:
    """This process as the jax stack has it, for a check made in-process: ``importlib`` finds no TensorFlow,
    tf-keras or Horovod (what ``choice.tensorflow_installed``/``horovod_installed`` read)."""
    found = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name in NOT_ON_THE_JAX_STACK else found(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def skipped_where_horovod_is(reason: str):
    """A test that the passes without Horovod run (make test-current, make test-jax): skipped in the horovod
    stack's pass, saying ``reason``."""
    return pytest.mark.skipif(importlib.util.find_spec("horovod") is not None, reason=reason)


# A test whose engine several stacks share (engine=jax, engine=tensorflow over MPI) and that is heavy (several
# processes, epochs) runs once, in the current stack's pass (make test-current: the stack that trains several
# processes without Horovod), not again in the horovod stack's, whose own engine for several processes is Horovod.
ONCE_ON_THE_CURRENT_STACK = skipped_where_horovod_is(
    "run by the current stack's pass (make test-current), where no Horovod is installed; this stack trains "
    "several processes on Horovod",
)

# engine=jax's own loop on one process: the current stack's pass runs it on the same JAX as the horovod stack's
# (0.10.2 on CI's Python 3.11, with TensorFlow installed) and the jax stack's pass on the newest JAX without
# TensorFlow; a third run in the horovod stack's pass adds nothing but minutes.
ON_THE_STACKS_WITHOUT_HOROVOD = skipped_where_horovod_is(
    "run by the current and jax stacks' passes (make test-current, make test-jax), on the same JAX as this "
    "stack's and on the newest",
)
