"""``python -m cifar_dist launcher=batchai ...`` end to end, in a subprocess,
against the local fake ARM + File service (real azure SDKs over HTTPS)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cifar_dist.launchers.batchai.schema import schema_errors
from helpers.cli import assert_ok, run_cli, start_cli
from helpers.fake_azure.fixtures import cli_env, launcher_overrides
from helpers.fake_azure.server import Fault

pytestmark = (
    pytest.mark.horovod
)  # the job's environment trains on Horovod (engine=auto: horovod), which the fake nodes run here


def _job_file_of(record) -> dict:
    return {"$schema": "x", "properties": json.loads(record.body)["properties"]}


def assert_key_only_in_the_mount_credentials(fake, run_dir, outputs, key):
    """The secret-leak check: a planted key is in no file of the run dir (config
    dumps, logs, job.json, node config, outputs), not in the console output, and
    on the wire only in the mount credentials of the job-create body."""
    assert key not in "".join(outputs)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) >= 8 and {".hydra", "batchai", "saved_models"} <= {p.relative_to(run_dir).parts[0] for p in files}
    for path in files:
        assert key.encode() not in path.read_bytes(), path
    carrying = [r for r in fake.requests if key in r.raw]
    assert carrying and all(r in fake.job_creates() for r in carrying)
    for record in carrying:
        props = json.loads(record.body)["properties"]
        assert props["mountVolumes"]["azureFileShares"][0]["credentials"].pop("accountKey") == key
        assert key not in json.dumps(props)  # not in the node's command line, environment or jobPreparation


def test_happy_path_submits_a_valid_job_streams_output_and_downloads_results_and_a_rerun_follows_it(
    fake_azure, storage_key, wheel_cache, tmp_path
):
    # On the way, throttling and an unavailable service, retried by azure-core (Retry-After honoured).
    arm_job = lambda path: path.startswith("/subscriptions/") and "/jobs/" in path  # noqa: E731
    is_job_create = lambda method, path: method == "PUT" and arm_job(path)  # noqa: E731
    is_job_get = lambda method, path: method == "GET" and arm_job(path)  # noqa: E731
    fake_azure.faults += [
        Fault(is_job_create, 429, times=2, retry_after="1"),
        Fault(is_job_get, 503, times=2, retry_after="0"),
    ]
    run_dir = tmp_path / "run"
    args = launcher_overrides(fake_azure, run_dir, wheel_cache, **{"launcher.scale_down": "true"})
    proc = run_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, timeout=60)
    assert_ok(proc)
    creates = fake_azure.job_creates()
    assert [r.status for r in creates] == [429, 429, 202]  # created once
    assert creates[2].at - creates[0].at >= 1.9  # Retry-After: 1 was honoured, twice
    assert [f.hits for f in fake_azure.faults] == [2, 2]

    # Everything the tutorial created by hand now exists, once.
    state = fake_azure.batchai
    assert list(state.workspaces) == ["batchaidev"] and list(state.clusters) == [("batchaidev", "nc6cluster")]
    (cluster_put,) = fake_azure.arm_requests("PUT", "/clusters/")
    cluster = json.loads(cluster_put.body)["properties"]
    assert cluster["vmSize"] == "Standard_NC6" and cluster["scaleSettings"]["manual"]["targetNodeCount"] == 2
    # ... and the cluster was scaled to 0 once the job was done.
    final = state.clusters[("batchaidev", "nc6cluster")]["properties"]["scaleSettings"]["manual"]
    assert final["targetNodeCount"] == 0
    create = creates[2]
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
    assert_key_only_in_the_mount_credentials(fake_azure, run_dir, [proc.stdout, proc.stderr], storage_key)

    # The same launch again neither submits the job again nor uploads anything again.
    uploads_before = [r for r in fake_azure.requests if r.method == "PUT" and r.query.get("comp") == "range"]
    again = run_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, timeout=60)
    assert_ok(again)
    assert fake_azure.job_creates() == creates
    assert "already exists (succeeded): following it" in again.stdout
    uploads_after = [r for r in fake_azure.requests if r.method == "PUT" and r.query.get("comp") == "range"]
    assert uploads_after == uploads_before
    assert_key_only_in_the_mount_credentials(fake_azure, run_dir, [again.stdout, again.stderr], storage_key)


def test_auth_failure_is_one_clear_line(fake_azure, storage_key, wheel_cache, tmp_path):
    env = cli_env(fake_azure, storage_key, FAKE_AZURE_TOKEN="expired-token")
    proc = run_cli(*launcher_overrides(fake_azure, tmp_path / "run", wheel_cache), env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "Azure rejected the credentials" in line]
    assert len(errors) == 1 and "az login" in errors[0]
    assert "Traceback" not in proc.stderr
    assert fake_azure.job_creates() == []


@pytest.mark.parametrize("mode", ["terminate", "detach"])
def test_ctrl_c_while_waiting(fake_azure, storage_key, wheel_cache, tmp_path, mode):
    fake_azure.batchai.running_s = 30.0  # long enough to interrupt
    args = launcher_overrides(fake_azure, tmp_path / "run", wheel_cache, **{"launcher.on_interrupt": mode})
    proc = start_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not any(j.state == "running" for j in fake_azure.jobs()):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        # The key reaches the launcher through its environment, never its arguments (ps).
        assert storage_key.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    (job,) = fake_azure.jobs()
    terminates = fake_azure.arm_requests("POST", "/terminate")
    if mode == "terminate":
        assert len(terminates) == 1 and job.terminated
    else:
        assert terminates == [] and job.state == "running"
        assert "keeps running: re-run the same command" in out + err
