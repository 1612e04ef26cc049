"""Low-priority preemption on Azure ML: the service puts the job back in the
queue, it runs again with the same (read-write mounted) outputs, and training
resumes from its last checkpoint there (trainer.resume=auto): no lost epochs.
The launcher says when the job was requeued."""

from __future__ import annotations

import json

import pytest

from helpers.cli import assert_ok, run_cli
from helpers.fake_azureml.fixtures import aml_env, aml_overrides
from helpers.fake_azureml.small_data import small_data

pytestmark = (
    pytest.mark.horovod
)  # the job's environment trains on Horovod (engine=auto: horovod), which the fake nodes run here


def test_a_preempted_job_resumes_from_its_checkpoint_in_its_outputs(fake_aml, snapshot_cache, tmp_path):
    fake_aml.state.preemptions = 1
    run_dir = tmp_path / "run"
    extra = {**small_data(tmp_path), "trainer.epochs": "2", "launcher.vm_priority": "low_priority"}
    proc = run_cli(
        *aml_overrides(fake_aml, run_dir, snapshot_cache, **extra), env=aml_env(fake_aml), cwd=tmp_path, timeout=600
    )
    assert_ok(proc)

    (compute,) = fake_aml.calls("PUT", "/computes/")
    assert json.loads(compute.body)["properties"]["properties"]["vmPriority"] == "LowPriority"
    (job,) = fake_aml.jobs()
    first, second = job.runs
    # Killed while still training, right after its first checkpoint; the second run finished.
    assert first.preempted and first.checkpoints_at_kill == ["checkpoint-001.h5"]
    assert first.proc.returncode == -9 and second.proc.returncode == 0
    assert job.status == "Completed"

    (requeued,) = [line for line in proc.stdout.splitlines() if "went back from Running to Queued" in line]
    assert "requeue 1" in requeued and "resumes from its last checkpoint in its outputs" in requeued
    assert f"Azure ML job {job.name} completed after 1 requeue(s)" in proc.stdout

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["complete"] is True and metrics["resumed_from_epoch"] >= 1
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["checkpoint-001.h5", "checkpoint-002.h5"]
    assert "resuming after epoch 1" in (run_dir / "cifar_dist_node.log").read_text()
    assert "requeued (1)" in (run_dir / "azureml" / "std_log.txt").read_text()
