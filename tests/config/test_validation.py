"""Validation of the config: every bad value is one line before anything starts.

A diverging run: tests/training/test_training_divergence.py. Strict JSON and the disk-full
message: tests/common/test_durable.py.
"""

import json
import re
import subprocess
import sys

import pytest

from cifar_dist.config.validation import ConfigError, is_validated, validate
from helpers.cli import cli_env, compose_cfg, one_error_line, run_cli
from helpers.no_horovod import as_the_jax_stack


def test_every_bad_value_is_listed_in_one_line():
    bad = {
        "model.num_classes=5": "model.num_classes=5 must be 10",
        "model.dense_units=0": "model.dense_units=0",
        "model.conv_dropout=1.5": "model.conv_dropout=1.5",
        "model.input_shape=[16,16,3]": "model.input_shape=[16, 16, 3]",
        "trainer.seed=-1": "trainer.seed=-1",
        "optimizer.lr=inf": "optimizer.lr=inf",
        "launcher=mpirun": "",
        "launcher.stall_shutdown_s=1": "launcher.stall_shutdown_s=1",
    }
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(*bad))
    message = str(err.value)
    assert "\n" not in message
    for fragment in bad.values():
        assert fragment in message
    with pytest.raises(ConfigError, match="model.num_classes=0"):
        validate(compose_cfg("model.num_classes=0"))


def test_evaluate_values_and_unset_environment_variables_are_one_line_before_anything_starts(tmp_path):
    """The first through the CLI (its one line, exit 2, no run dir); the others are the same kind of refusal, checked
    where the CLI's preflight checks them (``validate``)."""
    run_dir = tmp_path / "run"
    proc = run_cli("task=evaluate", f"hydra.run.dir={run_dir}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cifar_dist: error: bad config:"), proc.stderr
    assert "task=evaluate needs evaluate.model=" in lines[0] and not run_dir.exists()
    for overrides, fragment in (
        (("task=evaluate", "evaluate.model=x.h5", "evaluate.batch_size=0"), "evaluate.batch_size=0 must be >= 1"),
        (
            ("data.path=${oc.env:CIFAR_DIST_TEST_UNSET}/cifar",),
            "data.path=${oc.env:CIFAR_DIST_TEST_UNSET}/cifar cannot be resolved",
        ),
        (("launcher=mpirun", "launcher.stall_shutdown_s=1"), "launcher.stall_shutdown_s=1 must be 0 (off) or >= 10"),
    ):
        with pytest.raises(ConfigError) as err:
            validate(compose_cfg(*overrides))
        line = str(err.value)
        assert "\n" not in line and line.startswith("bad config:") and fragment in line, line


def test_a_data_setting_the_data_set_does_not_read_is_refused_in_one_line(tmp_path):
    """``data=sample data.path=DIR`` trained on the packaged sample, DIR recorded and unread (issue 47, item 9). The
    CLI's preflight refuses it as every bad value (``validate``; its one line: the CLI tests above and below)."""
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg("data=sample", f"data.path={tmp_path / 'mine'}", "trainer.epochs=1"))
    assert str(err.value) == (
        f"bad config: data.path={tmp_path / 'mine'} is not read by data=sample (only by "
        "data=cifar10, data=cifar100, data=folder): remove it, or choose a data option that reads it"
    )
    for overrides, fragment in (
        (("data=folder", "data.path=x", "data.download=false"), "data.download=false is not read by data=folder"),
        (("data=cifar10", "data.shuffle_buffer=100"), "data.shuffle_buffer=100 is not read by data=cifar10"),
        (("data=custom", "data._target_=m.f", "data.cache_dir=c"), "data.cache_dir=c is not read by data=custom"),
    ):
        with pytest.raises(ConfigError, match=re.escape(fragment)):
            validate(compose_cfg(*overrides))
    for overrides in (
        ("data=cifar100", "data.path=x", "data.download=false", "data.cache_dir=c"),
        ("data=folder", "data.path=x", "data.shuffle_buffer=100"),
        ("data=sample", "data.path=null", "data.download=true"),  # the defaults, spelled out: nothing ignored
    ):
        validate(compose_cfg(*overrides))


def test_a_batch_larger_than_the_data_is_one_line(tmp_path):
    proc = run_cli(
        "data=sample", "trainer.batch_size=100000", "trainer.epochs=1", f"hydra.run.dir={tmp_path / 'run'}", timeout=300
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "cifar_dist: error: trainer.batch_size=100000 is larger than the" in proc.stderr


@pytest.mark.parametrize("launcher", ["mpirun", "gloo"])
def test_a_multi_rank_launchers_own_settings_are_refused_with_the_other_values(launcher, tmp_path):
    """launcher.np, bind_to, the hosts' slots and the stall timeout are the launcher's own checks
    (``config_problems``), listed in validation's one line with the config's other bad values."""
    bad = ("trainer.epochs=0", f"launcher={launcher}", "launcher.np=0", "launcher.bind_to=cores")
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(*bad, "launcher.stall_shutdown_s=1"))
    message = str(err.value)
    assert "\n" not in message and message.startswith("bad config: trainer.epochs=0 must be >= 1; ")
    for fragment in (
        "launcher.stall_shutdown_s=1 must be 0 (off) or >= 10",
        "launcher.np=0 must be >= 1",
        "launcher.bind_to='cores' must be auto, core or none",
    ):
        assert fragment in message
    short = ("launcher.np=3", "launcher.hosts=[h1:1,h2:1]")
    with pytest.raises(ConfigError, match=r"launcher.np=3 exceeds the 2 slots of the hosts \(h1:1,h2:1;"):
        validate(compose_cfg(f"launcher={launcher}", *short))
    validate(compose_cfg(f"launcher={launcher}", *short, "launcher.oversubscribe=true"))
    for overrides, fragment in (
        (("launcher.np=100000",), "launcher.np=100000 exceeds the"),
        (("launcher.hosts=[h1:0]",), "bad slot count in launcher.hosts entry 'h1:0'"),
        ((f"launcher.hostfile={tmp_path / 'none'}",), f"cannot read launcher.hostfile {tmp_path / 'none'}"),
    ):
        with pytest.raises(ConfigError, match=re.escape(fragment)):
            validate(compose_cfg(f"launcher={launcher}", *overrides))


def test_a_launcher_setting_is_refused_before_the_run_dir_exists(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        "launcher=mpirun", "launcher.np=3", "launcher.hosts=[h1:1,h2:1]", f"hydra.run.dir={run_dir}", timeout=120
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("cifar_dist: error: bad config: launcher.np=3 exceeds the 2 slots of the hosts")
    assert not run_dir.exists() and not [p for p in tmp_path.iterdir() if p.name != "run"]


COUNTING_APP = """
import atexit, json, sys
import cifar_dist.config.validation as validation
from cifar_dist.launchers.base import Launcher

counts = {"validations": 0, "launchers": 0}
checks = validation.problems
def problems(cfg):  # the checks of every value: what one validation runs
    counts["validations"] += 1
    return checks(cfg)
validation.problems = problems
def new(cls, *args, **kwargs):
    counts["launchers"] += 1
    return object.__new__(cls)
Launcher.__new__ = new
def fake_task(cfg, output_dir):  # a task that trains nothing
    return {}
atexit.register(lambda: print("COUNTS " + json.dumps(counts)))
from cifar_dist.app import main
sys.argv = ["cifar_dist", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize(
    "role, overrides, expected",
    [
        ("launching", ("task._target_=__main__.fake_task",), {"validations": 1, "launchers": 1}),
        ("launching", ("launcher=mpirun", "launcher.dry_run=true"), {"validations": 1, "launchers": 1}),
        ("rank", ("engine=tensorflow", "task._target_=__main__.fake_task"), {"validations": 1, "launchers": 1}),
        (  # a sweep: each point validated once, one launcher for the points with equal settings
            "launching",
            ("-m", "launcher=mpirun", "launcher.dry_run=true", "optimizer.lr=1e-4,2e-4"),
            {"validations": 2, "launchers": 1},
        ),
    ],
)
def test_each_process_validates_once_and_builds_its_launcher_once(tmp_path, role, overrides, expected):
    """The launching process validates before Hydra writes anything (the preflight) and builds the launcher
    there; the app, the engine choice and the trainer use both. A rank validates where it composes its config."""
    script = tmp_path / "counting_app.py"
    script.write_text(COUNTING_APP)
    env = cli_env(**({"CIFAR_DIST_CHILD": "1"} if role == "rank" else {}))
    dirs = (f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    proc = subprocess.run(
        [sys.executable, str(script), *overrides, *dirs], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("COUNTS ")]
    assert json.loads(line[len("COUNTS ") :]) == expected


def test_a_copy_of_a_validated_config_is_trusted_and_a_changed_engine_is_checked(monkeypatch):
    from cifar_dist.config.schema import typed
    from cifar_dist.training.engines import choice

    cfg = compose_cfg("launcher=gloo", "launcher.np=2")
    validate(cfg)
    assert is_validated(cfg) and is_validated(typed(cfg))  # the trainer's copy: not validated again
    assert not is_validated(compose_cfg())
    # engine=auto becomes JAX where Horovod is missing: what the launcher cannot run is refused then, in one line.
    monkeypatch.setattr(choice, "horovod_installed", lambda: False)
    with pytest.raises(ConfigError, match=r"^bad config: launcher=gloo starts Horovod's Gloo ranks, which"):
        choice.resolve_engine(cfg)


@pytest.mark.jax_stack
def test_the_jax_stack_refuses_the_engines_that_need_tensorflow_naming_the_stack(monkeypatch):
    """Issue 57, item 3: without TensorFlow, ``engine=tensorflow`` started anyway (a ``ModuleNotFoundError``
    traceback), and ``engine=horovod``'s refusal said "(the current stack)"."""
    from cifar_dist.config.validation import launcher_problems

    configs = {name: compose_cfg(f"engine={name}") for name in ("tensorflow", "horovod", "jax")}
    as_the_jax_stack(monkeypatch)
    (tensorflow,) = launcher_problems(configs["tensorflow"])
    assert tensorflow.startswith("engine=tensorflow needs TensorFlow: TensorFlow is not installed in this environment")
    assert "(the jax stack)" in tensorflow and "tensorflow extra" in tensorflow and "engine=jax" in tensorflow
    (horovod,) = launcher_problems(configs["horovod"])
    assert horovod.startswith("engine=horovod: Horovod is not installed in this environment (the jax stack)")
    assert launcher_problems(configs["jax"]) == []


@pytest.mark.jax_stack
@pytest.mark.parametrize(
    "tensorflow, horovod, stack",
    [(True, True, "the horovod stack"), (True, False, "the current stack"), (False, False, "the jax stack")],
)
def test_the_stack_is_named_by_what_is_installed(monkeypatch, tensorflow, horovod, stack):
    from cifar_dist.training.engines import choice

    monkeypatch.setattr(choice, "tensorflow_installed", lambda: tensorflow)
    monkeypatch.setattr(choice, "horovod_installed", lambda: horovod)
    assert choice.installed_stack() == stack


@pytest.mark.jax_stack
def test_engine_tensorflow_without_tensorflow_is_one_line_for_real(tmp_path):
    """The same in a process where TensorFlow cannot be imported (``env_without_tensorflow``), as the CLI runs."""
    from helpers.no_horovod import env_without_tensorflow

    site = tmp_path / "site"
    site.mkdir()
    run_dir = tmp_path / "run"
    proc = run_cli("engine=tensorflow", "data=sample", f"hydra.run.dir={run_dir}", env=env_without_tensorflow(site))
    line = one_error_line(proc)
    assert "engine=tensorflow needs TensorFlow" in line and "(the jax stack)" in line and not run_dir.exists(), line


def test_jit_compile_on_several_tensorflow_processes_is_refused_before_anything_starts(monkeypatch, tmp_path):
    """Issue 57, item 14: ``trainer.jit_compile=true`` on several engine=tensorflow processes was refused by the
    engine once both ranks had started: the line twice, mpirun's abort banner, a run dir left."""
    from cifar_dist.training.engines import choice

    several = ("engine=tensorflow", "trainer.jit_compile=true", "launcher=mpirun", "launcher.np=2")
    with pytest.raises(ConfigError, match=r"trainer.jit_compile=true cannot run on 2 engine=tensorflow processes: XLA"):
        validate(compose_cfg(*several))
    validate(compose_cfg(*several[:3], "launcher.np=1"))  # one process: the engine's own rule (its GPU)
    validate(compose_cfg("engine=jax", *several[1:]))  # every JAX step is compiled by XLA anyway
    # engine=auto choosing TensorFlow for 2 processes on CPUs (no Horovod): refused when it is chosen.
    auto = compose_cfg("trainer.jit_compile=true", "launcher=mpirun", "launcher.np=2", "trainer.accelerator=cpu")
    validate(auto)
    monkeypatch.setattr(choice, "horovod_installed", lambda: False)
    monkeypatch.setattr(choice, "tensorflow_installed", lambda: True)
    with pytest.raises(ConfigError, match=r"trainer.jit_compile=true cannot run on 2 engine=tensorflow processes"):
        choice.resolve_engine(auto)
    monkeypatch.undo()
    run_dir = tmp_path / "run"
    proc = run_cli(*several, "data=sample", f"hydra.run.dir={run_dir}")
    line = one_error_line(proc)
    assert "trainer.jit_compile=true cannot run on 2 engine=tensorflow processes" in line and not run_dir.exists()
    assert "mpirun" not in proc.stderr.replace("launcher=mpirun", ""), proc.stderr  # no rank started
