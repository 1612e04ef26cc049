"""``launcher=azureml``: the job as data. The dry run writes the command job
YAML that ``az ml job create --file`` accepts (checked with the SDK's own
load_job), the environment's Dockerfile and the compute YAML, prints the
equivalent az ml commands, and sends no request."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from cifar_dist.launchers.azureml.config import AzureMLLauncherConf, resolve_settings
from cifar_dist.launchers.azureml.job import dockerfile, pinned_requirements
from cifar_dist.launchers.base import LaunchError
from helpers.cli import assert_ok, error_lines, run_cli
from helpers.fake_azureml.fixtures import aml_env, aml_overrides


def test_dry_run_writes_a_job_the_sdk_loads_and_sends_nothing(fake_aml, snapshot_cache, tmp_path):
    run_dir = tmp_path / "run"
    extra = {
        "launcher.dry_run": "true",
        "launcher.instance_count": "4",
        "launcher.process_count_per_instance": "2",
        "launcher.vm_priority": "low_priority",
        "trainer.resume": "false",  # warned about on low-priority VMs
        "optimizer.lr": "0.002",
        "+launcher.env.FOO": "bar",
    }
    proc = run_cli(
        *aml_overrides(fake_aml, run_dir, snapshot_cache, **extra), env=aml_env(fake_aml), cwd=tmp_path, timeout=60
    )
    assert_ok(proc)
    assert fake_aml.requests == [] and fake_aml.proxy.tunnelled == []
    assert "trainer.resume=false on low-priority VMs" in proc.stdout + proc.stderr

    job_file = run_dir / "azureml" / "job.yml"
    assert f"Dry run: wrote {job_file}" in proc.stdout
    doc = yaml.safe_load(job_file.read_text())
    assert doc["type"] == "command" and doc["compute"] == "azureml:gpu-cluster"
    assert doc["resources"] == {"instance_count": 4}
    assert doc["distribution"] == {"type": "mpi", "process_count_per_instance": 2}
    assert doc["outputs"] == {"run_dir": {"type": "uri_folder", "mode": "rw_mount"}}
    assert doc["environment"] == {"build": {"path": "environment"}}
    assert doc["environment_variables"]["CIFAR_DIST_CHILD"] == "1" and doc["environment_variables"]["FOO"] == "bar"

    # Every rank runs the job's own overrides in-process, pinned to the mounted output.
    argv = shlex.split(doc["command"])
    app = argv[argv.index("--") + 1 :]
    assert argv[:3] == ["python", "-m", "cifar_dist.launchers.ranks.rank_exec"]
    assert app[:3] == ["python", "-m", "cifar_dist"]
    assert "optimizer.lr=0.002" in app and "launcher=local" in app
    assert "hydra.run.dir='${{outputs.run_dir}}'" in app and "hydra.output_subdir=null" in app
    assert "hydra.job.name=cifar_dist_node" in app  # the ranks' log does not overwrite the launch's own
    assert not any(a.startswith("launcher.") for a in app)

    # The code is this package laid out as installed: `python -m cifar_dist` runs from it.
    code = Path(doc["code"])
    assert (code / "cifar_dist" / "__main__.py").is_file()
    assert (code / "cifar_dist" / "conf" / "config.yaml").is_file()
    assert (code / "cifar_dist" / "launchers" / "ranks" / "rank_exec.py").is_file()

    # The image: the base image, MPI, the pinned TensorFlow/tf-keras, Horovod built against them.
    docker = (run_dir / "azureml" / "environment" / "Dockerfile").read_text()
    assert "FROM tensorflow/tensorflow:2.18.1-gpu" in docker
    assert "tensorflow==2.18.1" in docker and "tf-keras" in docker and "horovod==0.28.1" in docker
    assert "HOROVOD_WITH_MPI=1" in docker

    compute = yaml.safe_load((run_dir / "azureml" / "compute.yml").read_text())
    assert compute["min_instances"] == 0 and compute["max_instances"] == 4 and compute["tier"] == "low_priority"

    # The SDK's own reading: a command job with MpiDistribution, loaded from the file.
    from azure.ai.ml import MpiDistribution, load_compute, load_job

    job = load_job(job_file)
    assert isinstance(job.distribution, MpiDistribution) and job.distribution.process_count_per_instance == 2
    assert job.resources.instance_count == 4 and job.compute == "gpu-cluster"
    assert load_compute(run_dir / "azureml" / "compute.yml").tier == "low_priority"

    commands = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("az ml ")]
    assert [c.split()[2:4] for c in commands] == [["compute", "create"], ["job", "create"], ["job", "download"]]
    assert f"--file {job_file}" in commands[1]


def test_missing_settings_are_named_in_one_line(tmp_path):
    proc = run_cli(
        *["launcher=azureml", "launcher.dry_run=true", f"hydra.run.dir={tmp_path / 'run'}"],
        env=aml_env_without_fake(),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    for name in ("launcher.subscription_id", "launcher.resource_group", "launcher.workspace", "launcher.compute"):
        assert name in line


def aml_env_without_fake():
    from helpers.fake_azure.fixtures import cli_env

    return cli_env(None, None)


def test_pins_come_from_the_installed_package():
    others, horovod = pinned_requirements()
    assert horovod == "horovod==0.28.1"
    assert "tensorflow==2.18.1" in others and not any(r.startswith("horovod") for r in others)
    settings = resolve_settings(
        AzureMLLauncherConf(subscription_id="s", resource_group="g", workspace="w", compute="c"), {}
    )
    text = dockerfile(settings)
    assert text.index("tensorflow==2.18.1") < text.index("horovod==0.28.1")  # Horovod is built against it
    assert "'jax[cpu]<0.13,>=0.10.2'" in text  # engine=jax runs in the same environment (the jax extra's range)
    assert "mpi4py>=3.1" in text  # and engine=tensorflow on several processes (the mpi extra)
    assert "'keras<4,>=3.15.1'" in text and "'tf-keras~=2.18.0'" in text  # the package's own and the horovod extra's


def test_bad_sizes_and_custom_clouds_are_refused():
    conf = AzureMLLauncherConf(
        subscription_id="s",
        resource_group="g",
        workspace="w",
        compute="c",
        instance_count=2,
        max_nodes=1,
        cloud="Elsewhere",
    )
    with pytest.raises(LaunchError) as err:
        resolve_settings(conf, {})
    assert "max_nodes=1 is below launcher.instance_count=2" in str(err.value)
    assert "launcher.arm_endpoint" in str(err.value)


def test_a_registered_environment_is_named_and_a_password_in_the_tracking_uri_stays_out_of_the_job_file(
    fake_aml, snapshot_cache, tmp_path
):
    """A registered environment is named instead of built (no Dockerfile, no compute.yml without
    create_compute); job.yml is readable by everyone in the workspace: no user:password or URI token in its
    description or command."""
    run_dir = tmp_path / "run"
    # (a token in the URI's query is refused before anything is written: tests/common/test_secrets_in_files.py)
    uri = "https://alice:Pa55word-in-uri@mlflow.example:8443/x"
    extra = {
        "launcher.dry_run": "true",
        "launcher.environment": "cifar-tf218-hvd:3",
        "launcher.create_compute": "false",
        "tracking": "mlflow",
        "tracking.uri": f"'{uri}'",
    }
    proc = run_cli(
        *aml_overrides(fake_aml, run_dir, snapshot_cache, **extra), env=aml_env(fake_aml), cwd=tmp_path, timeout=60
    )
    assert_ok(proc)
    text = (run_dir / "azureml" / "job.yml").read_text()
    doc = yaml.safe_load(text)
    assert doc["environment"] == "azureml:cifar-tf218-hvd:3"
    assert not (run_dir / "azureml" / "environment").exists() and not (run_dir / "azureml" / "compute.yml").exists()
    assert "compute create" not in proc.stdout
    assert "tracking.uri=" in doc["command"] and "mlflow.example:8443/x" in doc["description"]
    for secret in ("Pa55word-in-uri", "alice"):
        assert secret not in text, secret
        assert secret not in proc.stdout + proc.stderr, secret
