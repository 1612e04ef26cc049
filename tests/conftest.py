"""The fixtures and hooks several test folders share: the session's one real Slurm, and the trained runs several
modules read (each trained once per session, for all pytest-xdist workers: helpers/once_per_session.py; a test
that changes a run dir works on a copy, ``shutil.copytree``).

Plain functions and constants live in the ``helpers`` package (tests/helpers/), imported as ``from helpers.cli
import ...``; the Azure doubles' fixtures are registered here as plugins, so no module imports a fixture.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.absl_stream import absl_writes_to_the_current_stderr
from helpers.cli import QUIET_RUN, assert_ok, run_cli, tiny_cifar
from helpers.once_per_session import build_once
from helpers.paths import NO_HOROVOD

pytest_plugins = ("helpers.fake_azure.fixtures", "helpers.fake_azureml.fixtures")

absl_writes_to_the_current_stderr()  # else a capsys test that configures logging closes pytest's capture


def pytest_itemcollected(item):
    """A test that writes into the checkout's conf/local (``local_options``), which every run of every other test
    reads, is marked ``serial``: ``make test`` runs it in the pass after the parallel one (pytest-xdist), alone."""
    if "local_options" in item.fixturenames:
        item.add_marker(pytest.mark.serial)


def pytest_ignore_collect(collection_path, config):
    """Where TensorFlow is not installed (the jax stack's pass of ``make test``), only the test modules that hold
    tests marked ``jax_stack`` are collected: the others may import TensorFlow, tf-keras or Horovod as they load."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if importlib.util.find_spec("tensorflow") is not None:
        return None
    return True if "jax_stack" not in collection_path.read_text() else None


def pytest_collection_modifyitems(config, items):
    """Tests marked ``horovod`` are skipped, each saying why in one line, where Horovod is not installed."""
    if importlib.util.find_spec("horovod") is not None:
        return
    for item in items:
        if item.get_closest_marker("horovod") is not None:
            item.add_marker(pytest.mark.skip(reason=NO_HOROVOD))


@pytest.fixture
def saved_figures(monkeypatch) -> list:
    """Every matplotlib figure saved during the test, as it was when saved (to read its plotted data back)."""
    from matplotlib.figure import Figure

    saved, save = [], Figure.savefig

    def recording_savefig(fig, *args, **kwargs):
        saved.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording_savefig)
    return saved


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """The session's one real single-node Slurm (tests/helpers/slurm_cluster.py), started when a test first asks
    (one per pytest-xdist worker: each cluster has its own ports, state and TmpFS)."""
    from helpers.slurm_cluster import start_cluster

    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(slurm):
    """The session's cluster, its node free again after each test."""
    yield slurm
    slurm.cancel_all()


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A CIFAR-10 folder of 256 train / 64 test images of the packaged sample (``tiny_cifar(tiny_data)``), for runs
    whose assertions do not depend on how much they learn: a few seconds per epoch instead of the sample's ten."""
    from helpers.cifar_fixtures import batch_files, sample_batches, write_folder

    def write(folder: Path) -> None:
        write_folder(folder / "cifar-10-batches-py", batch_files(*sample_batches(per_batch=64)))

    return build_once(tmp_path_factory, "tiny-cifar", write)  # one path for all workers: half_run's resumes name it


@pytest.fixture(scope="session")
def quiet_tiny_run(tiny_data) -> tuple:
    """The overrides of a run on ``tiny_data`` that prints, plots and logs nothing it does not need to: half_run's."""
    return (*tiny_cifar(tiny_data), *QUIET_RUN)


@pytest.fixture(scope="session")
def half_run_overrides(quiet_tiny_run) -> tuple:
    """``half_run``'s overrides without its stop after epoch 1: a run with them resumes it."""
    return (*quiet_tiny_run, "trainer.batch_size=64", "trainer.epochs=2")


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """One short real training run on the packaged sample (3 epochs, seed 7), read by e2e/, evaluation/, rundir/ and
    training/ tests (train_e2e, evaluate, evaluate_run_data, saved_run, cpu_kernels); trained once for all pytest-xdist
    workers. Returns (run dir, its finished process: returncode, stdout, stderr)."""

    def train(folder: Path) -> None:
        proc = assert_ok(
            run_cli("data=sample", "trainer.epochs=3", "trainer.seed=7", f"hydra.run.dir={folder / 'run'}")
        )
        (folder / "proc.json").write_text(json.dumps([proc.args, proc.returncode, proc.stdout, proc.stderr]))

    folder = build_once(tmp_path_factory, "trained_run", train)
    return folder / "run", subprocess.CompletedProcess(*json.loads((folder / "proc.json").read_text()))


@pytest.fixture(scope="session")
def half_run(tmp_path_factory, half_run_overrides):
    """One epoch of a 2-epoch run: a run dir with a checkpoint to resume from (``half_run_overrides``; copy it before
    changing it), read by
    rundir/ tests (resume_policy, resume_hostile, rundir_lock, rundir_ranks_lock) and resumed by train_e2e's; trained
    once for all pytest-xdist workers, each of which gets its own copy."""

    def train(folder: Path) -> None:
        run_dir = folder / "run"
        proc = run_cli(*half_run_overrides, "trainer.max_epochs_per_run=1", f"hydra.run.dir={run_dir}")
        assert_ok(proc)
        assert (run_dir / "checkpoints" / "checkpoint-001.h5").is_file()

    run_dir = tmp_path_factory.mktemp("rundir") / "run"
    shutil.copytree(build_once(tmp_path_factory, "half_run", train) / "run", run_dir)
    return run_dir
