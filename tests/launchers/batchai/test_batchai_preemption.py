"""Low-priority preemption on Batch AI: the service requeues the job, the job
runs again on a new node in the same run dir on the share, and training
resumes from its last checkpoint (trainer.resume=auto): no lost epochs. The
launcher says when and why a job was requeued, and why a job failed."""

from __future__ import annotations

import json
import time

import pytest

from helpers.cifar_fixtures import BATCH_DIR, batch_files, sample_batches, write_folder
from helpers.cli import assert_ok, run_cli
from helpers.fake_azure.fixtures import cli_env, launcher_overrides

pytestmark = (
    pytest.mark.horovod
)  # the job's environment trains on Horovod (engine=auto: horovod), which the fake nodes run here


def test_a_requeue_and_a_failure_are_reported_with_the_service_reasons(fake_azure, storage_key, wheel_cache, tmp_path):
    """A simulated job, preempted half-way and then failing: the launcher reports the
    requeue with executionInfo.errors, restarts its stdout stream, and ends with the
    failure's exit code and reason."""
    fake_azure.batchai.preemptions = 1
    run_dir = tmp_path / "run"
    args = launcher_overrides(fake_azure, run_dir, wheel_cache, **{"+launcher.env.FAKE_OUTCOME": "fail"})
    proc = run_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, timeout=60)
    assert proc.returncode == 3, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    (job,) = fake_azure.jobs()
    assert (job.attempt, job.preempted) == (2, 1)
    (requeued,) = [line for line in out.splitlines() if "was requeued by Batch AI" in line]
    assert "NodePreempted: The low-priority node running the job was preempted" in requeued
    assert "(nodeId=tvm-fake_1, attempt=1)" in requeued and "resumes from its last checkpoint" in requeued
    (failed,) = [line for line in out.splitlines() if "failed after 1 requeue(s) with exit code 3" in line]
    assert "JobFailed: The job exited with exit code 3" in failed
    # Both runs' stdout is kept, the restart marked: the second run's file started afresh.
    saved = (run_dir / "batchai" / "stdout.txt").read_text()
    assert saved.count("restarted after requeue 1") == 1
    after = saved.split("restarted after requeue 1")[1]
    assert "Epoch 1/6" in after and "Epoch 6/6" in after


@pytest.mark.slow  # 1.3 min; cloud preemption stays in the default suite (test_azureml_preemption)
def test_a_preempted_training_job_resumes_from_its_checkpoint_on_the_share(
    fake_azure, storage_key, wheel_cache, tmp_path
):
    """The node entry really runs (a local process, a local folder as the mounted share):
    killed once its first checkpoint is on the share, requeued, run again; the second run
    resumes after epoch 1 and the job ends with both epochs."""
    fake_azure.batchai.node_root = tmp_path / "mounts"
    fake_azure.batchai.preemptions = 1
    run_dir = tmp_path / "run"
    # The packaged sample's real images, 128 of each train batch and 128 test images: the
    # test is about resuming, and the whole sample takes minutes per epoch on a busy 2-core
    # machine. (A local path works because the "node" is a process on this machine.)
    data = write_folder(tmp_path / "data" / BATCH_DIR, batch_files(*sample_batches(per_batch=128))).parent
    extra = {
        "launcher.node_count": "1",  # one local process per run
        "data": "cifar10",
        "data.path": str(data),
        "data.download": "false",
        "trainer.epochs": "2",
        "trainer.batch_size": "128",  # 4 steps an epoch
        "trainer.tensorboard": "false",
        "trainer.plot": "false",
        "trainer.verbose": "2",
        "launcher.poll_interval_s": "0.1",
    }
    start = time.monotonic()
    proc = run_cli(
        *launcher_overrides(fake_azure, run_dir, wheel_cache, **extra),
        env=cli_env(fake_azure, storage_key),
        cwd=tmp_path,
        timeout=240,
    )
    elapsed = time.monotonic() - start
    assert_ok(proc)

    (job,) = fake_azure.jobs()
    first, second = job.runs
    # The first run was killed while it was still training, right after its first checkpoint.
    assert first.preempted and first.checkpoints_at_kill == ["checkpoint-001.h5"]
    assert first.proc.returncode == -9 and second.proc.returncode == 0
    assert (job.attempt, job.state) == (2, "succeeded")

    # The launcher said so, and why.
    (requeued,) = [line for line in proc.stdout.splitlines() if "was requeued by Batch AI" in line]
    assert "NodePreempted" in requeued and "resumes from its last checkpoint on the share" in requeued
    assert f"Batch AI job {job.name} succeeded after 1 requeue(s)" in proc.stdout

    # The metrics downloaded from the share: every epoch, the second run resumed after the first.
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["complete"] is True and metrics["run"]["epochs"] == 2 and metrics["run"]["train_images"] == 512
    assert metrics["resumed_from_epoch"] >= 1
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["checkpoint-001.h5", "checkpoint-002.h5"]
    assert (run_dir / "saved_models" / "keras_cifar10_trained_model.h5").is_file()
    assert "resuming after epoch 1" in (run_dir / "cifar_dist_node.log").read_text()
    # The node's stdout, as streamed: both runs, the restart marked between them.
    saved = (run_dir / "batchai" / "stdout.txt").read_text()
    assert "restarted after requeue 1" in saved
    print(f"preempted run took {elapsed:.1f} s")
