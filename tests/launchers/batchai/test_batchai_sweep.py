"""A sweep with launcher=batchai: the sweep launcher hands the Batch AI launcher
every point at once; it submits each as its own job, then follows all of them
in one loop (their waits overlap). No Hydra callback is involved."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from helpers.cli import assert_ok, run_cli
from helpers.fake_azure.fixtures import cli_env, launcher_overrides

pytestmark = (
    pytest.mark.horovod
)  # the job's environment trains on Horovod (engine=auto: horovod), which the fake nodes run here


def test_sweep_of_three_runs_its_jobs_concurrently(fake_azure, storage_key, wheel_cache, tmp_path):
    fake_azure.batchai.finish_after_jobs = 3  # jobs finish once all three exist (or after 20 s)
    sweep_dir = tmp_path / "sweep"
    # No Hydra callback at all: nothing depends on one to run the points or write the summary.
    args = ["-m", "optimizer.lr=0.1,0.01,0.001", f"hydra.sweep.dir={sweep_dir}", "~hydra.callbacks.run_dir_check"]
    args += [
        a for a in launcher_overrides(fake_azure, tmp_path / "unused", wheel_cache) if not a.startswith("hydra.run.dir")
    ]
    proc = run_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, timeout=90)
    assert_ok(proc)

    creates = [r for r in fake_azure.job_creates() if r.status == 202]
    jobs = fake_azure.jobs()
    assert len(creates) == 3 and len({j.name for j in jobs}) == 3
    first_done = min(j.finished_at for j in jobs)
    assert all(r.at < first_done for r in creates), "a point was submitted only after another had finished"
    assert all(j.state == "succeeded" for j in jobs)
    # Watched together: every job was polled again after every other job's first poll.
    polls = {
        j.name: [
            r.at
            for r in fake_azure.arm_requests("GET", f"/jobs/{j.name}")
            if r.path.rstrip("/").endswith(f"/jobs/{j.name}")
        ]
        for j in jobs
    }
    assert all(len(times) >= 2 for times in polls.values()), polls
    assert max(min(t) for t in polls.values()) < min(max(t) for t in polls.values()), "the waits did not overlap"

    lrs, job_dirs = set(), set()
    for num in range(3):
        point = sweep_dir / str(num)
        assert json.loads((point / "metrics.json").read_text())["test"]["accuracy"] == 0.625
        assert (point / "saved_models" / "keras_cifar10_trained_model.h5").is_file()
        doc = json.loads((point / "job.json").read_text())
        job_dirs.add(doc["properties"]["horovodSettings"]["commandLineArgs"].split()[1])
        lrs.add(OmegaConf.load(point / "batchai" / "job_config.yaml").optimizer.lr)  # what the nodes train with
    assert len(job_dirs) == 3 and lrs == {0.1, 0.01, 0.001}
    assert (sweep_dir / "sweep_summary.csv").is_file()
