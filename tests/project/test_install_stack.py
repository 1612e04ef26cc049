"""Which stack scripts/install.sh installs for which Python (scripts/install_stack.py, read off setup.cfg's
extras' markers): Python 3.14, where TensorFlow has no wheel, gets the jax stack by itself, and a stack a
Python cannot hold is refused in one line that names the way out, before anything is installed."""

import os
import subprocess
import sys

import pytest

from helpers.cli import run_script
from helpers.paths import REPO

pytestmark = pytest.mark.jax_stack


def install_stack(*args):
    return run_script("install_stack.py", *args, timeout=60)


@pytest.mark.parametrize(
    "python, stack",
    [("3.10", "horovod"), ("3.11", "horovod"), ("3.12", "current"), ("3.13", "current"), ("3.14", "jax")],
)
def test_auto_picks_the_first_stack_the_python_can_hold(python, stack):
    done = install_stack("auto", "--python-version", python)
    assert done.returncode == 0, done.stderr
    chosen, why = done.stdout.rstrip("\n").split("\t")
    assert chosen == stack
    assert f"Python {python}" in why and "CIFAR_DIST_STACK=horovod|current|jax picks one" in why


@pytest.mark.parametrize(
    "asked, python, way_out",
    [
        ("horovod", "3.12", "CIFAR_DIST_STACK=current, or PYTHON=python3.11"),
        ("current", "3.14", "CIFAR_DIST_STACK=jax, or PYTHON=python3.13"),
        ("jax", "3.11", "PYTHON=python3.12"),
        ("tensorflow", "3.12", "use auto, horovod, current or jax"),
    ],
)
def test_a_stack_the_python_cannot_hold_is_refused_in_one_line(asked, python, way_out):
    done = install_stack(asked, "--python-version", python)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and way_out in done.stderr


def test_a_stack_asked_for_on_a_python_that_holds_it_is_taken():
    for asked, python in [("horovod", "3.11"), ("current", "3.13"), ("jax", "3.14"), ("jax", "3.12")]:
        done = install_stack(asked, "--python-version", python)
        assert done.returncode == 0 and done.stdout.startswith(f"{asked}\t"), (asked, python, done.stderr)


def test_install_sh_refuses_before_installing_anything(tmp_path):
    venv = tmp_path / "venv"
    refused_here = "jax" if sys.version_info < (3, 12) else "horovod"
    env = dict(os.environ, CIFAR_DIST_STACK=refused_here, CIFAR_DIST_VENV=str(venv), PYTHON=sys.executable)
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "install.sh")], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "needs Python" in done.stderr and done.stdout == ""
    assert not venv.exists()
