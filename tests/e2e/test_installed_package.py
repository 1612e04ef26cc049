"""Installed, not run from the source tree: a wheel (`pip install .`) and an editable
install (`pip install -e .`), each used from another directory, compose the config
and run a 1-point sweep through the sweep launcher (hydra/launcher=cifar_dist,
registered by the app, not found by Hydra's plugin discovery: that misses
editable installs, Hydra issues #2359 and #3252)."""

import csv
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from helpers.cli import assert_ok, cli_env, read_metrics, run_cli
from helpers.paths import REPO

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)

# The 1-point sweep: in-process launcher, one short epoch on the packaged sample.
SWEEP = (
    "-m",
    "trainer.epochs=1",
    "data=sample",
    "trainer.batch_size=128",
    "trainer.epoch_policy=shard",
    "trainer.plot=false",
    "trainer.tensorboard=false",
    "trainer.verbose=0",
    "hydra.sweep.dir=sweep",
)
WHERE = (
    "import cifar_dist, cifar_dist.launchers.sweep_launcher as s, hydra_plugins.cifar_dist_launcher as h; "
    "print(cifar_dist.__file__); print(s.__file__); print(h.__file__)"
)


def _one_point_sweep(python: str, cwd: Path, env: dict) -> None:
    cfg = subprocess.run(
        [python, "-m", "cifar_dist", "--cfg", "hydra", "-p", "hydra.launcher"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_ok(cfg)
    assert "hydra_plugins.cifar_dist_launcher.cifar_dist_launcher.CifarDistLauncher" in cfg.stdout
    proc = run_cli(*SWEEP, cwd=cwd, env=env, python=python)
    assert_ok(proc)
    assert read_metrics(cwd / "sweep" / "0")["complete"] is True
    (row,) = csv.DictReader(open(cwd / "sweep" / "sweep_summary.csv"))
    assert row["status"] == "ok" and float(row["test_accuracy"]) >= 0
    assert not (REPO / "sweep").exists()


def test_wheel_carries_configs_launchers_and_sample_and_sweeps_from_anywhere(tmp_path):
    wheels, site, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("cifar_dist-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in (
        "cifar_dist/conf/config.yaml",
        "cifar_dist/conf/experiment/fast.yaml",
        "cifar_dist/conf/hydra/default.yaml",
        "cifar_dist/launchers/sweep_launcher.py",
        "cifar_dist/launchers/batchai/node_entry.py",
        "hydra_plugins/cifar_dist_launcher/cifar_dist_launcher.py",
        "cifar_dist/data/sample/cifar-10-sample.tar.gz",
    ):
        assert name in names, name
    assert "hydra_plugins/__init__.py" not in names  # a namespace package, shared with other Hydra plugins
    assert not any(n.startswith("tests/") for n in names)
    assert wheel.stat().st_size < 17 * 2**20  # the package stays small (sample <= ~16 MB)

    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = cli_env(PYTHONPATH=str(site))
    where = subprocess.run([sys.executable, "-c", WHERE], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert_ok(where)
    assert all(line.startswith(str(site)) for line in where.stdout.split()), where.stdout  # not the source tree
    _one_point_sweep(sys.executable, elsewhere, env)


@pytest.mark.slow  # 1 min; the suite itself runs on the editable install, and the wheel test stays
def test_editable_install_sweeps_from_anywhere(tmp_path):
    """A fresh venv that sees this one's dependencies (a .pth line), with this repository
    installed editable into it by setuptools' own editable mode."""
    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    fresh_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(fresh_site, "project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = cli_env()
    env.pop("PYTHONPATH", None)
    where = subprocess.run([python, "-c", WHERE], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert_ok(where)
    cifar, launcher, shim = where.stdout.split()
    assert cifar == str(REPO / "cifar_dist" / "__init__.py")
    assert launcher == str(REPO / "launchers" / "sweep_launcher.py")  # package_dir: launchers/ is cifar_dist.launchers
    assert shim == str(REPO / "hydra_plugins" / "cifar_dist_launcher" / "__init__.py")
    _one_point_sweep(python, elsewhere, env)
