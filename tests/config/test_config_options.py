"""Config options: one home each, a dataclass marked ``@config_option(group, name)``.

Every built-in option composes exactly as recorded before the options left
their YAML stubs (tests/config/composed_options.yaml), holds its dataclass's
defaults, and no ``*_schema`` entry is left to be offered or selected. A
launcher defined in a test module (tests/config/own_launcher.py) appears under
``launcher=`` with no other edit. ``python -m cifar_dist --help`` is the app's
own page with the real choices.
"""

import importlib
import importlib.resources
import os
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import cifar_dist.config.schema
from cifar_dist.all_options import register_configs
from cifar_dist.config.options import OPTION_ATTR
from cifar_dist.launchers import option_modules
from helpers.cli import assert_ok, cli_env, run_cli

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)

TESTS = Path(__file__).resolve().parent
RECORDED = yaml.safe_load((TESTS / "composed_options.yaml").read_text())
GROUPS = ("data", "model", "optimizer", "trainer", "engine", "launcher", "task", "tracking", "experiment", "debug")

register_configs()


@pytest.fixture
def compose_job():
    """The composed job config as ``--cfg job`` prints it, read back as plain YAML."""
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        yield lambda *overrides: yaml.safe_load(OmegaConf.to_yaml(compose("config", overrides=list(overrides))))


@pytest.mark.parametrize("option", list(RECORDED))
def test_every_built_in_option_composes_as_recorded(compose_job, option):
    expected = {**RECORDED["default"], **RECORDED[option]} if option != "default" else RECORDED["default"]
    assert compose_job(*([option] if option != "default" else [])) == expected


def _built_in_options():
    """Every ``group=option`` that cifar_dist itself offers (a test's own launcher excluded)."""
    register_configs()
    found = set()
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        for group in loader.list_groups(""):
            for option in loader.get_group_options(group):
                node = ConfigStore.instance().repo.get(group, {}).get(f"{option}.yaml")
                if not group.startswith("hydra") and (node is None or node.provider == "cifar_dist"):
                    found.add(f"{group}={option}")
    return found


def test_the_record_covers_every_built_in_option_and_no_schema_entry_is_an_option():
    options = _built_in_options()
    assert options == set(RECORDED) - {"default"}
    assert not [o for o in options if "schema" in o]


def _option_classes():
    modules = [cifar_dist.config.schema] + [importlib.import_module(name) for name in option_modules()]
    found = [
        v
        for m in modules
        for v in vars(m).values()
        if isinstance(v, type) and OPTION_ATTR in v.__dict__ and v.__module__ == m.__name__
    ]
    return [cls for cls in found if not cls.__dict__[OPTION_ATTR][0].startswith("hydra/")]  # the job's own groups


@pytest.mark.parametrize("cls", _option_classes(), ids=lambda c: "{}={}".format(*c.__dict__[OPTION_ATTR]))
def test_each_option_is_its_dataclass_defaults(compose_job, cls):
    """Values live in the dataclass: no YAML file changes what the option composes to."""
    group, name, package = cls.__dict__[OPTION_ATTR]
    composed = compose_job(f"{group}={name}")
    defaults = yaml.safe_load(OmegaConf.to_yaml(OmegaConf.structured(cls)))
    if package == "_global_":
        assert {key: composed[key] for key in defaults} == defaults
    else:
        assert composed[group] == defaults


def _stored_options(repo=None, group: str = "") -> set:
    """``(group, option)`` of every option cifar_dist stores in the ConfigStore (a dataclass each)."""
    repo = ConfigStore.instance().repo if repo is None else repo
    found = set()
    for key, node in repo.items():
        if isinstance(node, dict):
            found |= _stored_options(node, f"{group}/{key}".lstrip("/"))
        elif group and node.provider == "cifar_dist":
            found.add((group, key.removesuffix(".yaml")))
    return found


def test_no_yaml_file_repeats_an_option():
    """No file of the config package (conf/ in a checkout, cifar_dist/conf installed) is ``<group>/<option>.yaml``
    of an option that a dataclass defines."""
    conf = Path(str(importlib.resources.files("cifar_dist.conf")))
    files = [p.relative_to(conf) for p in conf.rglob("*.yaml")]
    assert [f for f in files if f.parent.name], f"found no config group files under {conf}"
    options = _stored_options()
    assert {("data", "sample"), ("model", "resnet9"), ("launcher", "slurm")} <= options
    assert [f for f in files if (f.parent.as_posix(), f.stem) in options] == []


# --- a launcher from a test module: the one documented way, no other edit ---


@pytest.fixture
def echo_launcher():
    """tests/config/own_launcher.py imported (which registers launcher=echo), and forgotten afterwards,
    so that later tests in the session see only the built-in launchers."""
    import own_launcher  # noqa: F401

    yield
    ConfigStore.instance().repo["launcher"].pop("echo.yaml", None)
    sys.modules.pop("own_launcher", None)


def test_a_launcher_defined_in_a_test_module_composes_typed(compose_job, echo_launcher):
    cfg = compose_job("launcher=echo", "launcher.note=hi")
    assert cfg["launcher"] == {"_target_": "own_launcher.EchoLauncher", "note": "hi"}
    from cifar_dist.config.override_check import command_line_problem

    assert "did you mean `note`?" in command_line_problem(["launcher=echo", "launcher.noet=hi"])


RUN_WITH_OWN_LAUNCHER = "import own_launcher; from cifar_dist.app import main; main()"


def _own_launcher_cli(*args, cwd):
    env = cli_env(PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    import subprocess

    return subprocess.run(
        [sys.executable, "-c", RUN_WITH_OWN_LAUNCHER, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_a_launcher_defined_in_a_test_module_is_listed_and_runs(tmp_path):
    helped = _own_launcher_cli("--help", cwd=tmp_path)
    assert_ok(helped)
    assert "launcher: azureml, batchai, echo, gloo, local, mpirun, slurm" in helped.stdout
    run = tmp_path / "run"
    ran = _own_launcher_cli("launcher=echo", "launcher.note=hi", f"hydra.run.dir={run}", cwd=tmp_path)
    assert_ok(ran)
    assert yaml.safe_load((run / "echo.json").read_text())["note"] == "hi"


# --- --help ---


def test_help_is_the_apps_own_page_with_the_real_choices(tmp_path):
    proc = run_cli("--help", cwd=tmp_path)
    assert_ok(proc)
    text = proc.stdout
    assert text.startswith("cifar_dist: data-parallel CIFAR-10 training")
    assert "powered by Hydra" not in text
    for line in (
        "launcher: azureml, batchai, gloo, local, mpirun, slurm",
        "model: airbench, resnet9, seed_cnn",
        "optimizer: adam, rmsprop, sgd, sgdw",
        "data: cifar10, cifar100, custom, folder, sample",
        "task: evaluate, train",
    ):
        assert line in text.splitlines()
    assert "schema" not in text
    examples = [line for line in text.splitlines() if line.startswith("python -m cifar_dist ") and "#" in line]
    assert len(examples) == 5
    assert "outputs/runs/" in text and "README" in text
    assert not (tmp_path / "outputs").exists()
