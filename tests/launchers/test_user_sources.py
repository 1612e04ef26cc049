"""What a launch composed from reaches every rank and job (launchers/user_sources.py), checked without training.

A user's project (tests/helpers/user_project.py: ``mymodels.py``, ``mydata.py``,
``myconf/``) is written into a temporary directory outside the checkout and
every launcher's dry run is started from there, as a user would: the
commands, batch scripts and job files must carry ``--config-dir``,
``--config-name``, ``hydra.searchpath`` and the user's modules, and what
cannot be carried is refused in one line before anything is submitted.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from cifar_dist.launchers.ranks.rank_env import python_path, rank_environment
from cifar_dist.launchers.user_sources import Carried, CarryError
from helpers.cli import assert_ok, cli_env, error_lines, run_cli
from helpers.fake_azure.fixtures import cli_env as azure_env
from helpers.fake_azure.fixtures import launcher_overrides
from helpers.fake_azureml.fixtures import aml_env, aml_overrides
from helpers.user_project import USER_ARGS, write_user_project


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The user's project, a search-path dir beside it, and a primary config of their own."""
    folder = write_user_project(tmp_path_factory.mktemp("user") / "project")
    (folder / "more" / "optimizer").mkdir(parents=True)
    (folder / "more" / "optimizer" / "quick.yaml").write_text("defaults:\n  - sgd\n  - _self_\nlr: 0.01\n")
    (folder / "myconf" / "myrun.yaml").write_text("defaults:\n  - config\n  - _self_\n")
    return folder


def user_cli(project: Path, *args: str, flags=(), env=None, timeout: float = 120):
    """``python -m cifar_dist --config-dir myconf <flags> model=tiny data=mine <args>`` from the project folder
    (Hydra's flags go before the overrides). The checkout stays on PYTHONPATH (as installed), the project
    does not: only cwd brings it."""
    return run_cli(*USER_ARGS[:2], *flags, *USER_ARGS[2:], *args, cwd=project, env=env or cli_env(), timeout=timeout)


def searchpath(project: Path) -> str:
    return f"hydra.searchpath=[file://{project / 'more'}]"


def child_of(command: list) -> list:
    """The app's own argv inside a rank command: what follows ``python -m cifar_dist``."""
    at = command.index("--")
    assert command[at + 2 : at + 4] == ["-m", "cifar_dist"], command
    return command[at + 4 :]


def assert_carried(child: list, project: Path, config_name: str = "myrun") -> None:
    assert child[:4] == ["--config-dir", str(project / "myconf"), "--config-name", config_name], child
    assert searchpath(project) in child and "model=tiny" in child and "data=mine" in child


def without(args: list, *keys: str) -> list:
    """The cloud fixtures' overrides minus their own data/debug choices (the user's project brings its data)."""
    return [a for a in args if a.split("=", 1)[0] not in keys]


def _dry_run_commands(stdout: str) -> list:
    return [
        shlex.split(line)
        for line in stdout.splitlines()
        if line.startswith("mpirun ") or line.startswith("horovodrun ")
    ]


# ---- the rule, from Hydra's record --------------------------------------------------------------
def _hydra_record(*sources, config_name="config"):
    return SimpleNamespace(
        runtime=SimpleNamespace(
            config_sources=[SimpleNamespace(provider=p, schema=s, path=path) for p, s, path in sources]
        ),
        job=SimpleNamespace(config_name=config_name),
    )


def test_the_rule_reads_hydras_record_and_finds_only_the_users_own_modules(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text("def build(num_classes): pass\n")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    hc = _hydra_record(
        ("hydra", "pkg", "hydra.conf"),
        ("main", "file", "/u/primary"),
        ("command-line", "file", "/u/conf"),
        ("hydra.searchpath in command-line", "file", "/u/more"),
        ("schema", "structured", ""),
        config_name="mine",
    )
    cfg = {
        "model": {"_target_": "mymodels.build"},
        "data": {"_target_": "mypkg.data.make"},
        "launcher": {"_target_": "cifar_dist.launchers.local.LocalLauncher"},
        "trainer": {"cb": [{"_target_": "tensorflow.keras.callbacks.Callback"}]},
    }
    carried = Carried.from_hydra(hc, cfg)
    assert carried.hydra_args() == ["--config-path", "/u/primary", "--config-dir", "/u/conf", "--config-name", "mine"]
    assert carried.search_dirs == ("/u/more",)
    assert {m.name: m.key for m in carried.modules} == {"mymodels": "model._target_", "mypkg": "data._target_"}
    assert carried.code_roots() == [str(tmp_path.resolve())]  # installed tensorflow, cifar_dist: not carried
    # A plain launch carries nothing: the children's command is as before.
    plain = Carried.from_hydra(
        _hydra_record(("main", "pkg", "cifar_dist.conf")), {"model": {"_target_": "cifar_dist.models.seed_cnn.build"}}
    )
    assert plain.hydra_args() == [] and plain.code_roots() == []


def test_the_rank_environment_puts_the_users_modules_first_on_pythonpath():
    env = rank_environment(code_roots=["/u/project"], environ={"PYTHONPATH": "/x:/u/project"})
    assert env["PYTHONPATH"] == os.pathsep.join(["/u/project", "/x"])
    assert "PYTHONPATH" not in rank_environment(environ={"PYTHONPATH": "/x"})  # nothing to carry: inherited as before
    # A snapshot job: its own relative dir, never the launching machine's paths.
    assert (
        rank_environment(code_roots=["user/code"], environ={"PYTHONPATH": "/x"}, same_files=False)["PYTHONPATH"]
        == "user/code"
    )
    assert python_path([], {}) is None


# ---- ranks that see this machine's files -------------------------------------------------------
@pytest.mark.parametrize("launcher", ["mpirun", pytest.param("gloo", marks=pytest.mark.horovod)])
def test_mpirun_and_gloo_ranks_get_the_config_dir_name_searchpath_and_modules(project, launcher):
    proc = assert_ok(
        user_cli(
            project,
            searchpath(project),
            f"launcher={launcher}",
            "launcher.dry_run=true",
            f"hydra.run.dir={project / 'runs' / launcher}",
            flags=("--config-name", "myrun"),
        )
    )
    (command,) = _dry_run_commands(proc.stdout)
    assert_carried(child_of(command), project)


@pytest.mark.parametrize("launcher", ["mpirun", "gloo"])
def test_the_ranks_environment_puts_the_jobs_modules_first(launcher, tmp_path, monkeypatch):
    """What mpirun forwards (-x PYTHONPATH) and horovodrun exports: the job's module roots first."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from cifar_dist.launchers.base import JobSpec
    from cifar_dist.launchers.concurrent_points import Batch
    from cifar_dist.launchers.user_sources import UserModule

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    module = UserModule("model._target_", "mymodels", "/u/project", "/u/project/mymodels.py")
    job = JobSpec(cfg=OmegaConf.create({}), output_dir=tmp_path, carried=Carried(modules=(module,)))
    target = {"mpirun": "cifar_dist.launchers.mpirun.MpirunLauncher", "gloo": "cifar_dist.launchers.gloo.GlooLauncher"}
    runner = instantiate({"_target_": target[launcher]}, _convert_="all")
    env = runner.environment(job)
    assert env["PYTHONPATH"] == os.pathsep.join(["/u/project", "/elsewhere"])
    assert "PYTHONPATH" in runner.forwarded_names(env)
    assert runner.environment()["PYTHONPATH"] == "/elsewhere"  # no job, nothing added
    if launcher == "mpirun":  # a concurrent sweep's one mpirun: every point's modules
        other = JobSpec(
            cfg=OmegaConf.create({}),
            output_dir=tmp_path,
            carried=Carried(modules=(UserModule("data._target_", "mydata", "/u/data", "/u/data/mydata.py"),)),
        )
        assert Batch(runner, [job, other]).runner().environment(job, other)["PYTHONPATH"].split(os.pathsep)[:2] == [
            "/u/project",
            "/u/data",
        ]


@pytest.mark.horovod  # concurrent points are Horovod groups of one mpirun
def test_a_sweeps_points_run_concurrently_with_the_same_config_sources(project):
    proc = assert_ok(
        user_cli(
            project,
            searchpath(project),
            "optimizer=quick",
            "optimizer.lr=0.01,0.02",
            "launcher=mpirun",
            "launcher.np=1",
            "launcher.concurrent=2",
            "launcher.dry_run=true",
            f"hydra.sweep.dir={project / 'runs' / 'sweep'}",
            flags=("-m", "--config-name", "myrun"),
        )
    )
    (command,) = _dry_run_commands(proc.stdout)
    programs = " ".join(command).split(" : ")
    assert len(programs) == 2
    for program in programs:
        assert_carried(child_of(shlex.split(program)), project)


def test_slurm_jobs_and_job_arrays_carry_them(project):
    run_dir = project / "runs" / "slurm"
    assert_ok(
        user_cli(
            project,
            searchpath(project),
            "launcher=slurm",
            "launcher.dry_run=true",
            f"hydra.run.dir={run_dir}",
            flags=("--config-name", "myrun"),
        )
    )
    script = (run_dir / "slurm" / "job.sbatch").read_text()
    (srun,) = [shlex.split(line[:-2]) for line in script.splitlines() if line.startswith("srun ")]
    assert_carried(child_of(srun), project)
    exports = [line for line in script.splitlines() if line.startswith("export PYTHONPATH=")]
    assert exports and shlex.split(exports[0])[1].split("=", 1)[1].split(os.pathsep)[0] == str(project.resolve())

    sweep = project / "runs" / "slurm-sweep"
    assert_ok(
        user_cli(
            project,
            "optimizer.lr=0.01,0.02",
            "launcher=slurm",
            "launcher.dry_run=true",
            f"hydra.sweep.dir={sweep}",
            flags=("-m",),
        )
    )
    for point in ("0", "1"):
        text = (sweep / point / "slurm" / "job.sbatch").read_text()
        (srun,) = [shlex.split(line[:-2]) for line in text.splitlines() if line.startswith("srun ")]
        assert child_of(srun)[:2] == ["--config-dir", str(project / "myconf")]


# ---- jobs that run from a copy of the code -----------------------------------------------------
def test_azureml_ships_the_users_files_and_points_the_command_at_them(project, fake_aml, snapshot_cache, tmp_path):
    run_dir = tmp_path / "run"
    args = without(aml_overrides(fake_aml, run_dir, snapshot_cache, **{"launcher.dry_run": "true"}), "data")
    assert_ok(user_cli(project, searchpath(project), *args, env=aml_env(fake_aml)))
    assert fake_aml.requests == []
    doc = yaml.safe_load((run_dir / "azureml" / "job.yml").read_text())
    code = Path(doc["code"])
    assert (code / "user" / "code" / "mymodels.py").read_text() == (project / "mymodels.py").read_text()
    assert (code / "user" / "code" / "mydata.py").is_file()
    assert (code / "user" / "conf" / "0" / "model" / "tiny.yaml").is_file()  # --config-dir
    assert (code / "user" / "conf" / "1" / "optimizer" / "quick.yaml").is_file()  # hydra.searchpath
    assert (code / "cifar_dist" / "__main__.py").is_file()
    app = child_of(shlex.split(doc["command"]))
    assert app[:2] == ["--config-dir", "user/conf/0"] and "model=tiny" in app
    assert "hydra.searchpath=[file://user/conf/1]" in app and searchpath(project) not in app
    assert doc["environment_variables"]["PYTHONPATH"] == "user/code"
    assert str(project) not in doc["command"]  # nothing of the launching machine's paths


def test_batchai_uploads_the_users_files_and_the_node_composes_with_them(
    project, fake_azure, storage_key, wheel_cache, tmp_path
):
    import subprocess

    from cifar_dist.launchers.batchai import node_entry

    run_dir = tmp_path / "run"
    args = without(launcher_overrides(fake_azure, run_dir, wheel_cache, **{"launcher.dry_run": "true"}), "debug")
    proc = assert_ok(user_cli(project, searchpath(project), *args, env=azure_env(fake_azure, storage_key), timeout=300))
    assert fake_azure.requests == []
    doc = json.loads((run_dir / "job.json").read_text())
    node_args = doc["properties"]["horovodSettings"]["commandLineArgs"].split()
    search = [node_args[i + 1] for i, a in enumerate(node_args) if a == "--search-dir"]
    (code_dir,) = [node_args[i + 1] for i, a in enumerate(node_args) if a == "--code-dir"]
    assert [s.rsplit("/", 3)[1:] for s in search] == [["user", "conf", "0"], ["user", "conf", "1"]]
    assert code_dir.endswith("/user/code")
    uploads = [shlex.split(line) for line in proc.stdout.splitlines() if "az storage file upload" in line]
    sources = {u[u.index("--path") + 1].split("/user/", 1)[-1]: u[u.index("--source") + 1] for u in uploads}
    assert sources["code/mymodels.py"] == str(project / "mymodels.py")
    assert sources["conf/0/model/tiny.yaml"] == str(project / "myconf" / "model" / "tiny.yaml")
    # The node composes the uploaded config with the copies as its search path (here: the originals).
    local = run_dir / "batchai"
    argv = node_entry.hydra_argv(
        str(local), "job_config", str(tmp_path / "node"), 0, [str(project / "myconf"), str(project / "more")]
    )
    node = subprocess.run(
        [sys.executable, "-m", "cifar_dist", *argv, "--cfg", "job"],
        cwd=tmp_path,
        env={**cli_env(), "CIFAR_DIST_CHILD": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_ok(node)
    assert yaml.safe_load(node.stdout)["model"]["_target_"] == "mymodels.build"


# ---- what cannot be carried --------------------------------------------------------------------
def test_a_config_path_is_refused_for_a_snapshot_job_in_one_line(project, fake_aml, snapshot_cache, tmp_path):
    import shutil

    primary = tmp_path / "primary"  # a copy of the package's configs, replacing them (--config-path)
    shutil.copytree(Path(__file__).resolve().parents[2] / "conf", primary, ignore=shutil.ignore_patterns("local"))
    args = aml_overrides(fake_aml, tmp_path / "run", snapshot_cache, **{"launcher.dry_run": "true"})
    proc = run_cli("--config-path", str(primary), *args, cwd=project, env=aml_env(fake_aml), timeout=120)
    assert fake_aml.requests == []
    errors = error_lines(proc)
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr[-3000:]
    assert f"launcher=azureml cannot carry --config-path {primary}" in errors[0] and "--config-dir" in errors[0]
    assert not (tmp_path / "run" / "azureml" / "job.yml").exists()


def test_too_large_or_namespace_sources_are_refused_in_one_line(tmp_path, monkeypatch):
    from cifar_dist.launchers import user_sources

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "data.bin").write_bytes(b"x" * 2048)
    monkeypatch.setattr(user_sources, "MAX_SHIPPED_BYTES", 1024)
    with pytest.raises(CarryError) as big:
        Carried(config_dir=str(conf)).shipped("azureml")
    assert str(big.value).count("\n") == 0 and f"config dir {conf} holds more than" in str(big.value)

    for part in ("a", "b"):
        (tmp_path / part / "nspkg").mkdir(parents=True)
        monkeypatch.syspath_prepend(str(tmp_path / part))
    (modules,) = user_sources.user_modules({"model": {"_target_": "nspkg.build"}})
    assert sorted(Carried(modules=(modules,)).code_roots()) == sorted(str((tmp_path / p).resolve()) for p in "ab")
    with pytest.raises(CarryError, match=r"^model\._target_: nspkg is a namespace package .*add an __init__\.py"):
        Carried(modules=(modules,)).shipped("batchai")
