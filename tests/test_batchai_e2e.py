"""``python -m cifar_dist launcher=batchai ...`` end to end, in a subprocess,
against the local fake ARM + File service (real azure SDKs over HTTPS)."""
from __future__ import annotations

import json
import signal
import time

import pytest

from fake_azure.fixtures import cli_env, fake_azure, launcher_overrides, run_cli, start_cli, storage_key, wheel_cache  # noqa: F401
from fake_azure.server import Fault

from cifar_dist.launchers.batchai.schema import schema_errors


def _job_file_of(record) -> dict:
    return {"$schema": "x", "properties": json.loads(record.body)["properties"]}


def test_happy_path_submits_a_valid_job_streams_output_and_downloads_results(fake_azure, storage_key, wheel_cache, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(launcher_overrides(fake_azure, run_dir, wheel_cache), cli_env(fake_azure, storage_key), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # Everything the tutorial created by hand now exists, once.
    state = fake_azure.batchai
    assert list(state.workspaces) == ["batchaidev"] and list(state.clusters) == [("batchaidev", "nc6cluster")]
    cluster = state.clusters[("batchaidev", "nc6cluster")]["properties"]
    assert cluster["vmSize"] == "Standard_NC6" and cluster["scaleSettings"]["manual"]["targetNodeCount"] == 2
    (create,) = fake_azure.job_creates()
    assert schema_errors(_job_file_of(create)) == []
    props = json.loads(create.body)["properties"]
    assert props["nodeCount"] == 2 and props["horovodSettings"]["processCount"] == 2
    assert props["constraints"]["maxWallClockTime"] == "P7D"
    assert props["mountVolumes"]["azureFileShares"][0]["credentials"] == {"accountKey": storage_key}

    # The wheel, the node config and the entry script were uploaded where the job looks for them.
    (job,) = fake_azure.jobs()
    assert job.state == "succeeded", job.errors
    # stdout was streamed while it ran, and the outputs are in the local run dir.
    assert "Epoch 6/6" in proc.stdout
    assert (run_dir / "batchai" / "stdout.txt").read_text().count("Epoch") == 6
    assert (run_dir / "saved_models" / "keras_cifar10_trained_model.h5").read_bytes().startswith(b"\x89HDF")
    assert (run_dir / "checkpoints" / "checkpoint-001.h5").is_file()
    assert json.loads((run_dir / "metrics.json").read_text())["test"]["accuracy"] == 0.625
    # The node's .hydra/ does not overwrite the launching run's own.
    assert "node: side" not in (run_dir / ".hydra" / "config.yaml").read_text()
    assert json.loads((run_dir / "job.json").read_text())["properties"]["mountVolumes"]["azureFileShares"][0][
        "credentials"
    ] == {"accountKey": "<AZURE_BATCHAI_STORAGE_KEY>"}
