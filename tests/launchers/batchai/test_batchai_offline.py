"""The Batch AI launcher without any Azure call: dry run, missing settings,
the secret never leaving the job body, and the pure job builder."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import pytest

from cifar_dist.launchers.azure.job_names import job_name
from cifar_dist.launchers.base import LaunchError
from cifar_dist.launchers.batchai.config import BatchAILauncherConf, resolve_settings
from cifar_dist.launchers.batchai.job import (
    KEY_PLACEHOLDER,
    ShareLayout,
    az_job_file,
    build_job_body,
    iso8601_duration,
)
from cifar_dist.launchers.batchai.schema import schema_errors
from helpers.cli import assert_ok, run_cli
from helpers.fake_azure.fixtures import cli_env, launcher_overrides
from helpers.paths import shared_path


def _settings(**conf):
    values = dict(subscription_id="sub", resource_group="rg", workspace="ws", cluster="c", storage_account="acct")
    values.update(conf)
    return resolve_settings(BatchAILauncherConf(**values), {"AZURE_BATCHAI_STORAGE_KEY": "s3cr3t=="}, submit=False)


LAYOUT = ShareLayout(share="cifardist", base="cifar", job="cifar_dist-abc-0", wheel="cifar/packages/h/w.whl")


def test_dry_run_writes_a_valid_job_json_prints_az_and_touches_nothing(fake_azure, storage_key, wheel_cache, tmp_path):
    run_dir = tmp_path / "run"
    args = launcher_overrides(fake_azure, run_dir, wheel_cache, **{"launcher.dry_run": "true"})
    proc = run_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, timeout=60)
    assert_ok(proc)
    assert fake_azure.requests == []
    doc = json.loads((run_dir / "job.json").read_text())
    assert doc["$schema"].endswith("/2018-05-01/job.json")
    assert schema_errors(doc) == []
    share = doc["properties"]["mountVolumes"]["azureFileShares"][0]
    assert share["credentials"] == {"accountKey": KEY_PLACEHOLDER}
    assert doc["properties"]["cluster"]["id"].endswith("/workspaces/batchaidev/clusters/nc6cluster")
    create = [line for line in proc.stdout.splitlines() if "az batchai job create" in line]
    assert len(create) == 1 and f"--config-file {run_dir / 'job.json'}" in create[0]
    assert '--storage-account-key "$AZURE_BATCHAI_STORAGE_KEY"' in create[0]
    assert storage_key not in proc.stdout + proc.stderr
    # One name for the key, the launcher's own: never az's $AZURE_STORAGE_KEY beside it.
    assert "AZURE_STORAGE_KEY" not in proc.stdout
    storage = [line for line in proc.stdout.splitlines() if line.strip().startswith("az storage ")]
    assert storage and all(line.endswith('--account-key "$AZURE_BATCHAI_STORAGE_KEY"') for line in storage)


def test_dry_run_uses_the_key_vault_reference_when_configured(fake_azure, wheel_cache, tmp_path):
    vault = "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.KeyVault/vaults/kv"
    extra = {
        "launcher.dry_run": "true",
        "launcher.key_vault_id": vault,
        "launcher.key_vault_secret_url": "https://kv.vault.azure.net/secrets/storage-key",
    }
    proc = run_cli(
        *launcher_overrides(fake_azure, tmp_path / "run", wheel_cache, **extra),
        env=cli_env(None, None),
        cwd=tmp_path,
        timeout=60,
    )
    assert_ok(proc)
    doc = json.loads((tmp_path / "run" / "job.json").read_text())
    assert schema_errors(doc) == []
    credentials = doc["properties"]["mountVolumes"]["azureFileShares"][0]["credentials"]
    assert credentials == {
        "accountKeySecretReference": {
            "sourceVault": {"id": vault},
            "secretUrl": "https://kv.vault.azure.net/secrets/storage-key",
        }
    }
    assert "--storage-account-key" not in proc.stdout


def test_missing_settings_are_listed_in_one_error(tmp_path):
    env = cli_env(None, None)
    proc = run_cli(*["launcher=batchai", f"hydra.run.dir={tmp_path / 'run'}"], env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    (line,) = [x for x in proc.stderr.splitlines() if "missing settings" in x]
    for needed in (
        "subscription_id",
        "resource_group",
        "location",
        "workspace",
        "cluster",
        "storage_account",
        "AZURE_BATCHAI_STORAGE_KEY",
    ):
        assert needed in line
    assert "Traceback" not in proc.stderr


def test_launcher_conf_is_importable_without_azure_sdks():
    code = (
        "import sys; import cifar_dist.launchers as l; l.register_built_in();"
        "import cifar_dist.launchers.batchai.launcher;"
        "bad = [m for m in sys.modules if m.startswith(('azure', 'msrest'))]; print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert_ok(proc)


def test_the_job_body_matches_the_schema_and_round_trips_through_the_sdk_models():
    from azure.mgmt.batchai import models
    from msrest import Serializer

    body = build_job_body(_settings(node_count=4, process_count=8, max_wall_clock_hours=1.5), LAYOUT, reveal_key=True)
    assert schema_errors(az_job_file(body)) == []
    params = models.JobCreateParameters.deserialize({"properties": body})
    assert params.constraints.max_wall_clock_time == datetime.timedelta(hours=1, minutes=30)
    serializer = Serializer({k: v for k, v in vars(models).items() if isinstance(v, type)})
    assert serializer.body(params, "JobCreateParameters") == {"properties": body}
    assert body["horovodSettings"]["processCount"] == 8 and body["nodeCount"] == 4
    assert "${" not in json.dumps(body)  # node-side variables are never OmegaConf interpolations


def test_the_public_recipe_fails_the_schema_as_written():
    errors = schema_errors(json.loads(shared_path("batchai", "example-horovod-job.json").read_text()))
    assert any("azureFileShares" in e for e in errors) and any("cluster" in e for e in errors)


def test_schema_violations_are_reported():
    body = build_job_body(_settings(), LAYOUT, reveal_key=False)
    body["nodeCount"] = "four"
    body["constraints"]["maxWallClockTime"] = "7.00:00:00"  # the schema's TimeSpan default is not the wire form
    del body["horovodSettings"]["pythonScriptFilePath"]
    errors = " | ".join(schema_errors(az_job_file(body)))
    assert "nodeCount: 'four' is not of type 'integer'" in errors
    assert "maxWallClockTime: '7.00:00:00' does not match" in errors
    assert "'pythonScriptFilePath' is a required property" in errors


@pytest.mark.parametrize("hours, wire", [(168, "P7D"), (1.5, "PT1H30M"), (24.5, "P1DT30M"), (1 / 3600, "PT1S")])
def test_wall_clock_is_iso8601(hours, wire):
    assert iso8601_duration(datetime.timedelta(hours=hours)) == wire


def test_job_names_are_deterministic_per_run_dir_and_point(tmp_path):
    a = job_name(tmp_path / "x", 0)
    assert a == job_name(tmp_path / "x", 0) != job_name(tmp_path / "x", 1) != job_name(tmp_path / "y", 0)
    assert len(a) <= 64


def test_invalid_names_are_refused_before_anything_runs():
    from cifar_dist.launchers.batchai.job import check_names

    with pytest.raises(LaunchError, match="launcher.cluster='nc6 cluster'.*launcher.share='My_Share'"):
        check_names(_settings(cluster="nc6 cluster"), ShareLayout("My_Share", "cifar", "j", "w"))


def test_the_node_config_recomposes_to_the_same_typed_config(tmp_path):
    """The uploaded config, composed by Hydra as the node does, gives the run's values with their schema types."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from omegaconf import OmegaConf, open_dict

    from cifar_dist.all_options import register_configs
    from cifar_dist.config.schema import EpochPolicy
    from cifar_dist.launchers.batchai.staging import node_job_config

    register_configs()
    overrides = ["launcher=batchai", "debug=fast", "optimizer=sgd", "optimizer.lr=0.05", "trainer.epoch_policy=shard"]
    with initialize_config_module("cifar_dist.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        choices = dict(cfg.hydra.runtime.choices)
        with open_dict(cfg):
            del cfg["hydra"]
    (tmp_path / "job_config.yaml").write_text(node_job_config(cfg, choices))
    # Compose exactly as the node does: `python -m cifar_dist --config-dir D --config-name job_config`.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cifar_dist",
            "--config-dir",
            str(tmp_path),
            "--config-name",
            "job_config",
            "--cfg",
            "job",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "CIFAR_DIST_CHILD": "1"},
    )
    assert_ok(proc)
    node = OmegaConf.to_container(OmegaConf.create(proc.stdout))
    expected = OmegaConf.to_container(cfg)
    expected["launcher"] = {"_target_": "cifar_dist.launchers.local.LocalLauncher"}
    assert node == expected
    # And the typed schema is back: the trainer gets enums, not strings.
    with initialize_config_dir(str(tmp_path), version_base="1.3"):
        typed = compose("job_config", overrides=["hydra.searchpath=[pkg://cifar_dist.conf]"])
    assert typed.trainer.epoch_policy is EpochPolicy.shard


def test_node_entry_quotes_the_run_dir_with_the_one_rule_and_reads_every_rank_variable(monkeypatch):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from cifar_dist.launchers.batchai import node_entry
    from cifar_dist.launchers.ranks.rank_exec import RANK_VARS

    run_dir = "/mnt/share/a\\b/it's=1,2 x"  # a backslash Hydra reads literally, a quote, '=', ',' and a space
    argv = node_entry.hydra_argv("/cfg", "job_config", run_dir, rank=1)
    (override,) = [a for a in argv if a.startswith("hydra.run.dir=")]
    assert (
        OverridesParser.create().parse_overrides([override])[0].value() == run_dir
    )  # the node's run dir is the one staged

    for name in RANK_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PMIX_RANK", "3")  # the wrappers' list, not a shorter one of its own
    assert node_entry._rank() == 3


def test_a_password_in_the_tracking_uri_reaches_the_nodes_only_as_a_secret(
    fake_azure, storage_key, wheel_cache, tmp_path
):
    """The node config and job.json hold the URI without user:password; remote=nodes sends them as secret variables."""
    run_dir = tmp_path / "run"
    uri = "https://alice:Pa55word-in-uri@mlflow.example:8443/x"
    args = launcher_overrides(
        fake_azure,
        run_dir,
        wheel_cache,
        **{"launcher.dry_run": "true", "tracking": "mlflow", "tracking.remote": "nodes", "tracking.uri": f"'{uri}'"},
    )
    proc = run_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, timeout=60)
    assert_ok(proc)
    doc = json.loads((run_dir / "job.json").read_text())
    assert schema_errors(doc) == []
    assert {s["name"] for s in doc["properties"]["secrets"]} == {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"}
    node_config = next((run_dir / "batchai").glob("*.yaml")).read_text()
    assert "https://mlflow.example:8443/x" in node_config
    for text in (json.dumps(doc), node_config, proc.stdout + proc.stderr):
        assert "Pa55word-in-uri" not in text


def test_secret_variables_are_revealed_only_in_a_real_submission():
    body = build_job_body(_settings(), LAYOUT, reveal_key=True, secrets={"MLFLOW_TRACKING_PASSWORD": "pw"})
    assert body["secrets"] == [{"name": "MLFLOW_TRACKING_PASSWORD", "value": "pw"}]
    body = build_job_body(_settings(), LAYOUT, reveal_key=False, secrets={"MLFLOW_TRACKING_PASSWORD": "pw"})
    assert body["secrets"] == [{"name": "MLFLOW_TRACKING_PASSWORD", "value": "<redacted>"}]
