"""``python -m cifar_dist launcher=azureml ...`` end to end, in a subprocess,
against the local Azure ML double (the real azure-ai-ml over HTTPS); the
double runs the job's command for real, with a local folder as its output.

A failed job (exit 1, the tail of its log): tests/launchers/azureml/test_azure_retries_and_secrets.py, whose
failing job also checks that no token or SAS signature lands anywhere."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from helpers.cli import assert_ok, error_lines, run_cli, start_cli
from helpers.fake_azureml.fixtures import aml_env, aml_overrides
from helpers.fake_azureml.server import Fault
from helpers.fake_azureml.small_data import small_data

pytestmark = (
    pytest.mark.horovod
)  # the job's environment trains on Horovod (engine=auto: horovod), which the fake nodes run here


def test_a_job_runs_end_to_end_and_its_outputs_come_home(fake_aml, snapshot_cache, tmp_path):
    # On the way, throttling and an unavailable service, retried by azure-core (Retry-After honoured).
    fake_aml.faults.append(Fault(lambda m, p: m == "PUT" and "/jobs/" in p, 429, times=2, retry_after="1"))
    fake_aml.faults.append(Fault(lambda m, p: m == "GET" and "/computes/" in p, 503, times=1, retry_after="0"))
    run_dir = tmp_path / "run"
    proc = run_cli(
        *aml_overrides(fake_aml, run_dir, snapshot_cache, **small_data(tmp_path)),
        env=aml_env(fake_aml),
        cwd=tmp_path,
        timeout=300,
    )
    assert_ok(proc)

    # The compute was created (0..N nodes), the code uploaded once, the job submitted once.
    (compute,) = fake_aml.calls("PUT", "/computes/")
    props = json.loads(compute.body)["properties"]
    assert props["computeType"] == "AmlCompute" and props["properties"]["scaleSettings"]["minNodeCount"] == 0
    assert len(fake_aml.calls("POST", "/startPendingUpload")) == 1
    (create,) = fake_aml.job_creates()
    puts = fake_aml.calls("PUT", "/jobs/")
    assert [r.status for r in puts] == [429, 429, 201]
    assert puts[2].at - puts[1].at >= 0.9  # Retry-After was honoured
    job_props = json.loads(create.body)["properties"]
    assert job_props["distribution"] == {"distributionType": "Mpi", "processCountPerInstance": 1}
    assert job_props["codeId"].split("/codes/")[0].endswith("/workspaces/cifar-ws")

    # Every status, in order, on the console; rank 0's log streamed.
    statuses = [
        line.split(": ")[-1] for line in proc.stdout.splitlines() if "Azure ML job cifar_dist-" in line and ": " in line
    ]
    seen = [s for s in statuses if s in ("NotStarted", "Queued", "Preparing", "Running", "Finalizing", "Completed")]
    assert seen == ["NotStarted", "Queued", "Preparing", "Running", "Finalizing", "Completed"], proc.stdout[-3000:]
    assert "Test accuracy" in proc.stdout and " - loss: " in proc.stdout

    # The result looks like a local run's, next to the launch's own files.
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["complete"] is True and metrics["run"]["epochs"] == 1
    assert (run_dir / "saved_models" / "keras_cifar10_trained_model.h5").is_file()
    assert (run_dir / "checkpoints" / "checkpoint-001.h5").is_file()
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / "cifar_dist.log").is_file()
    assert "Test accuracy" in (run_dir / "cifar_dist_node.log").read_text()  # rank 0's own log, beside ours
    assert (run_dir / "logs" / "rank.0.log").is_file()
    assert "Test accuracy" in (run_dir / "azureml" / "std_log.txt").read_text()

    # A second launch of the same run dir follows the job it already submitted.
    again = run_cli(
        *aml_overrides(fake_aml, run_dir, snapshot_cache, **small_data(tmp_path)),
        env=aml_env(fake_aml),
        cwd=tmp_path,
        timeout=300,
    )
    assert_ok(again)
    assert len(fake_aml.job_creates()) == 1 and "already exists" in again.stdout


def test_an_auth_failure_is_one_clear_line(fake_aml, snapshot_cache, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        *aml_overrides(fake_aml, run_dir, snapshot_cache),
        env=aml_env(fake_aml, FAKE_AZURE_TOKEN="expired"),
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert "az login" in line and "Traceback" not in proc.stderr
    assert fake_aml.job_creates() == []


@pytest.mark.parametrize("mode", ["cancel", "detach"])
def test_ctrl_c_cancels_or_detaches(fake_aml, snapshot_cache, tmp_path, mode):
    fake_aml.state.node_root = None  # a simulated job that stays Running: this is about Ctrl-C
    fake_aml.state.hold_running = True
    run_dir = tmp_path / "run"
    extra = {"launcher.on_interrupt": mode}
    proc = start_cli(
        *aml_overrides(fake_aml, run_dir, snapshot_cache, **extra),
        env=aml_env(fake_aml),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any(j.status == "Running" for j in fake_aml.jobs()):
            time.sleep(0.2)
        assert any(j.status == "Running" for j in fake_aml.jobs()), "the job never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    (job,) = fake_aml.jobs()
    cancels = fake_aml.calls("POST", "/cancel")
    if mode == "cancel":
        assert len(cancels) == 1 and job.status == "Canceled"
        assert f"Azure ML job {job.name} canceled" in out + err
    else:
        assert cancels == [] and job.status == "Running"
        assert "keeps running: re-run the same command to follow it" in out + err


def test_wait_false_returns_once_submitted(fake_aml, snapshot_cache, tmp_path):
    fake_aml.state.node_root = None
    proc = run_cli(
        *aml_overrides(fake_aml, tmp_path / "run", snapshot_cache, **{"launcher.wait": "false"}),
        env=aml_env(fake_aml),
        cwd=tmp_path,
        timeout=300,
    )
    assert_ok(proc)
    (job,) = fake_aml.jobs()
    assert job.status not in ("Completed", "Failed", "Canceled")
    assert "launcher.wait=false, not following it" in proc.stdout + proc.stderr
    assert fake_aml.calls("GET", "/details") == []


def test_an_existing_compute_is_used_and_checked_not_created(fake_aml, snapshot_cache, tmp_path):
    fake_aml.state.node_root = None
    base = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/cifar-rg/providers/"
    key = base + "Microsoft.MachineLearningServices/workspaces/cifar-ws/computes/gpu-cluster"
    fake_aml.state.computes[key] = {
        "id": key,
        "name": "gpu-cluster",
        "properties": {
            "computeType": "AmlCompute",
            "provisioningState": "Succeeded",
            "properties": {"vmSize": "STANDARD_NC6S_V3", "scaleSettings": {"maxNodeCount": 2, "minNodeCount": 0}},
        },
    }
    overrides = {"launcher.create_compute": "false", "launcher.instance_count": "4"}
    proc = run_cli(
        *aml_overrides(fake_aml, tmp_path / "big", snapshot_cache, **overrides),
        env=aml_env(fake_aml),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "compute gpu-cluster scales to at most 2 nodes but the job needs 4" in line
    missing = {"launcher.create_compute": "false", "launcher.compute": "nope"}
    proc = run_cli(
        *aml_overrides(fake_aml, tmp_path / "none", snapshot_cache, **missing),
        env=aml_env(fake_aml),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "compute nope does not exist" in line and "launcher.create_compute=true" in line
    assert fake_aml.job_creates() == [] and fake_aml.calls("PUT", "/computes/") == []
