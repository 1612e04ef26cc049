"""One rank environment for every launcher (launchers/ranks/rank_env.py), checked on what each launcher generates.

The rule for TF_USE_LEGACY_KERAS: the launching user's explicit value is
carried to the ranks (an explicit "0" then gets the Keras-3 refusal at rank
start, as cifar_dist/__init__.py documents); unset, the ranks get "1".
Offline: commands, scripts and job documents are built, nothing runs.
"""

import os
import shlex
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.utils import instantiate

from cifar_dist.all_options import register_configs
from cifar_dist.launchers.azureml.config import AzureMLLauncherConf
from cifar_dist.launchers.azureml.config import resolve_settings as aml_settings
from cifar_dist.launchers.azureml.job import job_document
from cifar_dist.launchers.base import JobSpec
from cifar_dist.launchers.batchai.config import BatchAILauncherConf
from cifar_dist.launchers.batchai.config import resolve_settings as batchai_settings
from cifar_dist.launchers.batchai.job import ShareLayout, build_job_body
from cifar_dist.launchers.ranks import hosts as hosts_mod
from cifar_dist.launchers.ranks.rank_env import rank_environment
from cifar_dist.launchers.slurm.config import conf_from_kwargs as slurm_conf
from cifar_dist.launchers.slurm.script import batch_script

register_configs()

KERAS = "TF_USE_LEGACY_KERAS"
CASES = [(None, "1"), ("0", "0"), ("1", "1")]  # (the launching user's value, what every rank gets)


@pytest.fixture
def user_keras(monkeypatch, request):
    value, expected = request.param
    if value is None:
        monkeypatch.delenv(KERAS, raising=False)
    else:
        monkeypatch.setenv(KERAS, value)
    return expected


def spec(tmp_path: Path, *overrides: str) -> JobSpec:
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return JobSpec(cfg=cfg, output_dir=tmp_path / "run", task_overrides=list(overrides), original_cwd=tmp_path)


@pytest.mark.parametrize("user_keras", CASES, indirect=True)
@pytest.mark.parametrize("runner", ["mpirun", "gloo"])
def test_mpirun_and_gloo_pass_the_rule_by_name(tmp_path, monkeypatch, user_keras, runner):
    monkeypatch.setattr(hosts_mod, "local_cores", lambda: 2)
    job = spec(tmp_path, f"launcher={runner}", "launcher.np=2", "data=sample")
    launcher = instantiate(job.cfg.launcher, _convert_="all")
    env = launcher.environment()
    argv = launcher.command(job, env)
    assert env[KERAS] == user_keras and env["CIFAR_DIST_CHILD"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    forwarded = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"] if runner == "mpirun" else list(env)
    assert KERAS in forwarded and not any(a.startswith(f"{KERAS}=") for a in argv)


@pytest.mark.parametrize("user_keras", CASES, indirect=True)
def test_the_slurm_batch_script_exports_the_rule(tmp_path, user_keras):
    text = batch_script(slurm_conf(dict(env={"NCCL_DEBUG": "INFO"})), spec(tmp_path, "launcher=slurm"), python="python")
    exports = {
        k: shlex.split(v)[0]
        for k, v in (line[len("export ") :].split("=", 1) for line in text.splitlines() if line.startswith("export "))
    }
    assert exports[KERAS] == user_keras
    assert exports["CIFAR_DIST_CHILD"] == "1" and exports["PYTHONUNBUFFERED"] == "1" and exports["NCCL_DEBUG"] == "INFO"


@pytest.mark.parametrize("user_keras", CASES, indirect=True)
def test_the_azure_ml_job_carries_the_rule(tmp_path, user_keras):
    conf = AzureMLLauncherConf(
        subscription_id="s", resource_group="rg", workspace="ws", compute="gpu", env={"FOO": "bar"}
    )
    doc = job_document(aml_settings(conf, {}), spec(tmp_path, "launcher=azureml"), "job1", tmp_path)
    assert doc["environment_variables"] == {
        "CIFAR_DIST_CHILD": "1",
        "PYTHONUNBUFFERED": "1",
        KERAS: user_keras,
        "FOO": "bar",
    }


@pytest.mark.parametrize("user_keras", CASES, indirect=True)
def test_the_batch_ai_job_and_its_node_entry_carry_the_rule(monkeypatch, user_keras):
    conf = BatchAILauncherConf(
        subscription_id="s",
        resource_group="rg",
        workspace="ws",
        cluster="c",
        storage_account="acct",
        env={"FOO": "bar"},
    )
    settings = batchai_settings(conf, {"AZURE_BATCHAI_STORAGE_KEY": "k=="}, submit=False)
    body = build_job_body(settings, ShareLayout("share", "base", "job", "base/w.whl"), reveal_key=False)
    env = {e["name"]: e["value"] for e in body["environmentVariables"]}
    assert env == {"CIFAR_DIST_CHILD": "1", "PYTHONUNBUFFERED": "1", KERAS: user_keras, "FOO": "bar"}

    # On the node: the job's variables are what the rank sees; the entry script keeps them and sets the guard.
    from cifar_dist import app
    from cifar_dist.launchers.batchai import node_entry

    for name in ("CIFAR_DIST_CHILD", "PYTHONUNBUFFERED", KERAS):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CIFAR_DIST_CHILD", "0")
    seen = {}
    monkeypatch.setattr(app, "main", lambda: seen.update(os.environ))
    monkeypatch.setattr(sys, "argv", ["node_entry.py"])
    node_entry.main(["--config-dir", "/cfg", "--config-name", "job_config", "--run-dir", "/mnt/run"])
    assert seen[KERAS] == user_keras and seen["CIFAR_DIST_CHILD"] == "1" and seen["FOO"] == "bar"


def test_the_users_launcher_env_wins_and_the_stall_check_is_shared():
    env = rank_environment({KERAS: "0", "X": "1"}, {"HOROVOD_CYCLE_TIME": "5"}, stall_shutdown_s=60, environ={})
    assert env == {
        "CIFAR_DIST_CHILD": "1",
        "PYTHONUNBUFFERED": "1",
        KERAS: "0",
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "30",
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "60",
        "HOROVOD_CYCLE_TIME": "5",
        "X": "1",
    }
