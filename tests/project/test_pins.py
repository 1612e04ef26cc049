"""Ranges, not pins (issue 56): ``keras`` and ``numpy`` are ranges whose lower ends the horovod stack installs
(scripts/install.sh's ``lower_ends``), and ``pip install 'cifar_dist[jax]'`` beside a JAX image's numpy 2.5 and
JAX 0.12 keeps both.

The second is asked of pip's own resolver, as a dry run with a report: ``--ignore-installed`` and a constraints
file that pins numpy 2.5.2 (the GPU image's) and JAX 0.12.0.1, so that the answer does not depend on what the venv
running the test holds. It is the same question as installing into a venv that has them: pip's default upgrade
strategy (only-if-needed) keeps an installed version every requirement admits, and the resolver fails where one
does not. A fresh venv with numpy and JAX installed per run would take minutes; this takes about 10 seconds (the
index's metadata, and this package's and antlr's metadata built). numpy 2.5 and JAX 0.12 need Python 3.12, so it
runs in the jax stack's pass.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import json
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from helpers.paths import REPO

IMAGE_PINS = {"numpy": "2.5.2", "jax": "0.12.0.1"}  # a JAX GPU image's (docs/install.md, "GPUs"), and JAX's newest
NO_INDEX = ("NewConnectionError", "Max retries exceeded", "Could not fetch URL", "Temporary failure in name resolution")


def install_requires() -> dict:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = [line.strip() for line in cfg["options"]["install_requires"].splitlines()]
    return {r.name: r for r in (Requirement(line) for line in lines if line and not line.startswith("#"))}


def lower_ends() -> dict:
    """What scripts/install.sh's ``lower_ends`` prints (the horovod stack's constraints), run from install.sh."""
    script = (REPO / "scripts" / "install.sh").read_text()
    program = re.search(r"lower_ends\(\) \{\n.*?<<'PYEOF'\n(.*?)\nPYEOF", script, re.S)[1]
    out = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, check=True)
    return dict(line.split("==") for line in out.stdout.split())


@pytest.mark.parametrize("name", ["keras", "numpy"])
def test_keras_and_numpy_are_ranges_whose_lower_end_the_horovod_stack_installs(name):
    requirement = install_requires()[name]
    operators = {spec.operator for spec in requirement.specifier}
    assert operators == {">=", "<"}, f"{requirement}: a range (>=lower,<upper), not a pin"
    lower = next(spec.version for spec in requirement.specifier if spec.operator == ">=")
    assert lower_ends()[name] == lower
    assert Version(IMAGE_PINS.get(name, lower)) in requirement.specifier


def test_the_horovod_stack_runs_at_the_lower_ends():
    """TensorFlow 2.18.1 declares numpy<2.1: the lower end must be one it takes, and what this venv holds."""
    try:
        importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the horovod stack's pass checks its own venv (this one has no Horovod)")
    ends = lower_ends()
    tensorflow_numpy = next(
        Requirement(r) for r in importlib.metadata.requires("tensorflow") if Requirement(r).name == "numpy"
    )
    assert Version(ends["numpy"]) in tensorflow_numpy.specifier, f"TensorFlow declares {tensorflow_numpy}"
    for name in ("keras", "numpy"):
        assert importlib.metadata.version(name) == ends[name], f"the horovod stack's {name} is not the lower end"


@pytest.mark.jax_stack
def test_installing_cifar_dist_jax_beside_numpy_2_5_and_jax_0_12_changes_neither(tmp_path):
    if sys.version_info < (3, 12):
        pytest.skip("numpy 2.5 and JAX 0.12 need Python 3.12 or newer: the jax stack's pass (make test-jax) runs this")
    constraints = tmp_path / "image.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in IMAGE_PINS.items()))
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    command += ["--disable-pip-version-check", "--report", str(report), "-c", str(constraints), f"{REPO}[jax]"]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    if proc.returncode and any(sign in proc.stderr for sign in NO_INDEX):
        pytest.skip(f"the package index cannot be reached: {proc.stderr.strip().splitlines()[-1][:200]}")
    assert proc.returncode == 0, proc.stderr[-3000:]  # ResolutionImpossible: a requirement excludes one of them
    installs = json.loads(report.read_text())["install"]
    chosen = {re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower(): i["metadata"]["version"] for i in installs}
    assert {name: chosen.get(name) for name in IMAGE_PINS} == IMAGE_PINS
    assert {"cifar-dist", "keras", "jaxlib"} <= set(chosen), sorted(chosen)
