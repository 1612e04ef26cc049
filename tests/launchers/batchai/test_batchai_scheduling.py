"""Batch AI scheduling knobs without any Azure call: ``launcher.scheduling_priority``
in the job, ``launcher.vm_priority`` in the cluster-create request, both checked
against the service's published schemas (the originals in ../shared/batchai and
the copies shipped in the package)."""

from __future__ import annotations

import json

import pytest

from cifar_dist.launchers.base import LaunchError
from cifar_dist.launchers.batchai.config import BatchAILauncherConf, conf_from_kwargs, resolve_settings
from cifar_dist.launchers.batchai.job import (
    ShareLayout,
    az_cluster_file,
    az_job_file,
    build_cluster_body,
    build_job_body,
)
from cifar_dist.launchers.batchai.schema import (
    cluster_schema_errors,
    load_schema,
    schema_errors,
    validate_cluster_file,
)
from helpers.cli import assert_ok, run_cli
from helpers.fake_azure.fixtures import cli_env, launcher_overrides
from helpers.paths import TESTS, shared_path

LAYOUT = ShareLayout(share="cifardist", base="cifar", job="cifar_dist-abc-0", wheel="cifar/packages/h/w.whl")
PUBLIC_KEY = (TESTS / "helpers" / "fake_azure" / "id_test.pub").read_text().strip()


def shared_schema(name: str) -> dict:
    return json.loads(shared_path("batchai", "schemas", "2018-05-01", name).read_text())


def _settings(**conf):
    values = dict(subscription_id="sub", resource_group="rg", workspace="ws", cluster="c", storage_account="acct")
    values.update(conf)
    # As Hydra hands them over: enums as strings.
    return resolve_settings(conf_from_kwargs(values), {}, submit=False)


def test_the_shipped_cluster_schema_is_the_published_one():
    assert load_schema("cluster-2018-05-01.json") == shared_schema("cluster.json")


def test_the_shipped_job_schema_is_the_published_horovod_one():
    """So ``schema_errors`` checks a job against the published horovod.json (and the launcher's contract);
    horovod.json is job.json without the other toolkits' optional settings, so a job that passes it passes
    job.json too."""
    assert load_schema() == shared_schema("horovod.json")


@pytest.mark.parametrize("priority", ["low", "normal", "high"])
def test_scheduling_priority_reaches_the_job_and_matches_the_published_schemas(priority):
    body = build_job_body(_settings(scheduling_priority=priority), LAYOUT, reveal_key=False)
    assert body["schedulingPriority"] == priority
    doc = az_job_file(body)
    assert schema_errors(doc) == []  # the published horovod.json, shipped (test above), and the contract


def test_an_unknown_scheduling_priority_is_refused_by_the_config_schema():
    with pytest.raises(ValueError, match="'urgent' is not a valid SchedulingPriority"):
        conf_from_kwargs({"scheduling_priority": "urgent"})
    # ... and the published schema would refuse it too, had it got through.
    body = build_job_body(_settings(), LAYOUT, reveal_key=False)
    body["schedulingPriority"] = "urgent"
    assert any("'urgent' is not one of ['low', 'normal', 'high']" in e for e in schema_errors(az_job_file(body)))


@pytest.mark.parametrize("priority", ["dedicated", "lowpriority"])
def test_vm_priority_reaches_the_cluster_create_body_and_matches_the_published_schema(priority):
    body = build_cluster_body(_settings(vm_priority=priority, vm_size="Standard_NC6"), 4, PUBLIC_KEY)
    assert body["vmPriority"] == priority
    assert body["scaleSettings"] == {"manual": {"targetNodeCount": 4, "nodeDeallocationOption": "requeue"}}
    doc = az_cluster_file(body)
    assert cluster_schema_errors(doc) == []  # the published cluster.json, shipped (test above), and the contract


def test_the_cluster_body_round_trips_through_the_sdk_models():
    from azure.mgmt.batchai import models
    from msrest import Serializer

    body = build_cluster_body(_settings(vm_priority="lowpriority"), 2, PUBLIC_KEY)
    params = models.ClusterCreateParameters.deserialize({"properties": body})
    assert params.vm_priority == "lowpriority" and params.scale_settings.manual.target_node_count == 2
    serializer = Serializer({k: v for k, v in vars(models).items() if isinstance(v, type)})
    assert serializer.body(params, "ClusterCreateParameters") == {"properties": body}


def test_cluster_schema_violations_are_one_line_errors():
    body = build_cluster_body(_settings(), 1, PUBLIC_KEY)
    body["vmPriority"] = "spot"
    del body["userAccountSettings"]["adminUserSshPublicKey"]
    errors = " | ".join(cluster_schema_errors(az_cluster_file(body)))
    assert "vmPriority: 'spot' is not one of ['dedicated', 'lowpriority']" in errors
    assert "'adminUserSshPublicKey' is a required property" in errors
    with pytest.raises(LaunchError) as info:
        validate_cluster_file(az_cluster_file(body))
    assert "\n" not in str(info.value) and "cluster schema" in str(info.value)


def test_a_cluster_needs_a_node_and_the_admin_key():
    with pytest.raises(LaunchError, match="at least 1 node"):
        build_cluster_body(_settings(), 0, PUBLIC_KEY)
    from cifar_dist.launchers.batchai.job import ssh_public_key

    with pytest.raises(LaunchError, match=r"does not exist \(ssh-keygen, or set launcher.ssh_public_key\)"):
        ssh_public_key(_settings(ssh_public_key="/nonexistent/id.pub"))
    assert BatchAILauncherConf().vm_priority.value == "dedicated"


def test_dry_run_writes_a_valid_low_priority_cluster_json_and_the_az_command(
    fake_azure, storage_key, wheel_cache, tmp_path
):
    run_dir = tmp_path / "run"
    extra = {"launcher.dry_run": "true", "launcher.vm_priority": "lowpriority", "launcher.scheduling_priority": "high"}
    proc = run_cli(
        *launcher_overrides(fake_azure, run_dir, wheel_cache, **extra),
        env=cli_env(fake_azure, storage_key),
        cwd=tmp_path,
        timeout=60,
    )
    assert_ok(proc)
    assert fake_azure.requests == []
    cluster = json.loads((run_dir / "cluster.json").read_text())
    assert cluster["properties"]["vmPriority"] == "lowpriority"
    assert cluster_schema_errors(cluster) == []
    job = json.loads((run_dir / "job.json").read_text())
    assert job["properties"]["schedulingPriority"] == "high"
    assert schema_errors(job) == []
    lines = proc.stdout.splitlines()
    create = [i for i, line in enumerate(lines) if "az batchai cluster create" in line]
    submit = [i for i, line in enumerate(lines) if "az batchai job create" in line]
    assert len(create) == 1 and f"--config-file {run_dir / 'cluster.json'}" in lines[create[0]]
    assert create[0] < submit[0]


@pytest.mark.parametrize(
    "resume, warned",
    [("auto", None), ("false", "refuse to touch its checkpoints"), ("true", "fail on its first start")],
)
def test_low_priority_vms_warn_when_a_requeued_job_could_not_resume(caplog, resume, warned):
    from omegaconf import OmegaConf

    from cifar_dist.launchers.batchai.launcher import _warn_if_requeue_cannot_resume

    cfg = OmegaConf.create({"task": {"name": "train"}, "trainer": {"resume": resume}})
    with caplog.at_level("WARNING"):
        _warn_if_requeue_cannot_resume(cfg, conf_from_kwargs({"vm_priority": "lowpriority"}))
        _warn_if_requeue_cannot_resume(cfg, conf_from_kwargs({"vm_priority": "dedicated"}))
    messages = [r.getMessage() for r in caplog.records]
    if warned is None:
        assert messages == []
    else:
        (message,) = messages
        assert warned in message and "use trainer.resume=auto" in message
