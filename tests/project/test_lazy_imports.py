"""A run imports only what it uses: a plain run never loads the optional heavy SDKs (issue 24).

Every Python process of the run (the launching process and, under mpirun, each
rank) records the modules it ended with, through a ``sitecustomize`` hook put
first on PYTHONPATH (which the launchers forward to the ranks). MLflow, the
Azure SDKs, Optuna and submitit belong to options the run did not choose;
Keras 3 (and the scikit-learn/matplotlib it pulls in) is not the Keras the
trainer uses (tf.keras is tf-keras), yet Horovod's Keras layer loaded it in
every rank; matplotlib is for the learning-curves plot only; JAX is engine=jax's
(and an engine=jax run loads no Horovod). The same run
with tracking=mlflow must load MLflow, or the check would prove nothing: that run is
tests/tracking/test_uri_secrets.py's, whose processes record their modules too
(helpers/imports_record.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from helpers.cli import cli_env
from helpers.imports_record import is_trainer, loaded, run_recording_imports

UNUSED = ("mlflow", "azure", "optuna", "submitit", "keras", "sklearn", "pandas", "matplotlib", "jax")


def unused_loaded(records):
    return {
        " ".join(r["argv"][:3]): [top for top in UNUSED if loaded(r, top)]
        for r in records
        if any(loaded(r, top) for top in UNUSED)
    }


def test_a_plain_run_loads_no_optional_sdk(tmp_path, tiny_data):
    _, records = run_recording_imports(tmp_path, tiny_data)
    assert any(is_trainer(r) for r in records), "no process trained: the hook recorded nothing useful"
    assert unused_loaded(records) == {}


@pytest.mark.mpi
@pytest.mark.horovod
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_mpirun_launcher_and_its_ranks_load_no_optional_sdk(tmp_path, tiny_data):
    _, records = run_recording_imports(
        tmp_path, tiny_data, "launcher=mpirun", "launcher.np=2", "launcher.oversubscribe=true"
    )
    assert sum(is_trainer(r) for r in records) == 2, [r["argv"] for r in records]  # both ranks recorded
    assert len(records) >= 5  # the launching process, and per rank its wrapper (rank_exec) and the rank
    assert unused_loaded(records) == {}


def test_an_engine_jax_run_loads_jax_and_no_horovod(tmp_path, tiny_data):
    _, records = run_recording_imports(tmp_path, tiny_data, "engine=jax")
    trainers = [r for r in records if is_trainer(r)]
    assert trainers and all(loaded(r, "jax") for r in trainers)
    assert [" ".join(r["argv"][:3]) for r in records if loaded(r, "horovod")] == []
    assert [" ".join(r["argv"][:3]) for r in trainers if loaded(r, "tensorflow")] == []  # installed, kept out


# What each rank's wrapper may load of cifar_dist: its own imports, what they import of common/, and the packages
# on their paths (issue 47, item 7: it loaded 50 modules of cifar_dist, Hydra and NumPy through launchers/__init__.py).
RANK_WRAPPER_MODULES = {
    "cifar_dist",
    "cifar_dist.common",
    "cifar_dist.common.atomic_files",
    "cifar_dist.common.environment",
    "cifar_dist.common.errors",
    "cifar_dist.common.keras_flavor",
    "cifar_dist.launchers",
    "cifar_dist.launchers.ranks",
    "cifar_dist.launchers.ranks.heartbeat",
    "cifar_dist.launchers.ranks.rank_exec",
    "cifar_dist.rundir",
    "cifar_dist.rundir.ranks_lock",
}


def test_each_ranks_wrapper_loads_the_standard_library_and_its_own_few_modules():
    """``python -m cifar_dist.launchers.ranks.rank_exec`` runs once per rank, per launch: what it imports is what it
    says (its docstring), in a fresh interpreter."""
    code = (
        "import json, sys; before = set(sys.modules)\n"
        "import cifar_dist.launchers.ranks.rank_exec\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = {m for m in loaded if m == "cifar_dist" or m.startswith("cifar_dist.")}
    others = sorted({m.split(".")[0] for m in loaded} - {"cifar_dist"} - set(sys.stdlib_module_names))
    assert sorted(ours - RANK_WRAPPER_MODULES) == [] and others == [], (sorted(ours), others)
