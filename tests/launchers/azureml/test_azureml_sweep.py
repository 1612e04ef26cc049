"""A sweep on Azure ML: ``launch_all`` submits every point before following
any, then watches all of them in one loop; each point's accuracy comes back
in its own result, in the points' order."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module
from hydra.utils import instantiate

from cifar_dist.all_options import register_configs
from cifar_dist.launchers.azureml.launcher import AzureMLLauncher
from cifar_dist.launchers.base import JobSpec
from helpers.fake_azureml.fixtures import aml_env, aml_overrides

pytestmark = (
    pytest.mark.horovod
)  # the job's environment trains on Horovod (engine=auto: horovod), which the fake nodes run here


def test_two_points_are_both_submitted_before_either_ends(fake_aml, snapshot_cache, tmp_path, monkeypatch):
    fake_aml.state.node_root = None  # simulated jobs (the fake writes their metrics): this is about the loop
    for key, value in aml_env(fake_aml).items():
        monkeypatch.setenv(key, value)
    # MLClient records the cloud it used in os.environ (AZUREML_CURRENT_CLOUD); undone after
    # the test, or every later `import azure.ai.ml` in a child process would look for the fake's cloud.
    monkeypatch.setenv("AZUREML_CURRENT_CLOUD", "AzureCloud")
    register_configs()
    jobs = []
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        for num, lr in enumerate(("0.001", "0.01")):
            run_dir = tmp_path / "sweep" / str(num)
            overrides = [o for o in aml_overrides(fake_aml, run_dir, snapshot_cache) if not o.startswith("hydra.")]
            overrides.append(f"optimizer.lr={lr}")
            cfg = compose("config", overrides=overrides)
            run_dir.mkdir(parents=True)
            jobs.append(JobSpec(cfg=cfg, output_dir=run_dir, task_overrides=overrides, multirun=True, job_num=num))
    launcher = instantiate(jobs[0].cfg.launcher)
    assert isinstance(launcher, AzureMLLauncher)

    results = launcher.launch_all(jobs)

    assert [r.exit_code for r in results] == [0, 0]
    first, second = sorted(fake_aml.jobs(), key=lambda j: j.created_at)
    assert second.created_at < first.ended_at, "the second point was submitted only after the first had ended"
    # Each point's result is its own, in the points' order.
    by_name = {j.name: j for j in fake_aml.jobs()}
    for job, result in zip(jobs, results):
        name = next(n for n in by_name if n.endswith(f"-{job.job_num}"))
        assert result.metrics["test"]["accuracy"] == fake_aml.state.simulated_accuracy(name)
        assert f"optimizer.lr={job.task_overrides[-1].split('=')[1]}" in by_name[name].props["command"]
    # One code upload for both points (same content hash), one compute.
    assert len(fake_aml.calls("POST", "/startPendingUpload")) == 1
    assert len(fake_aml.calls("PUT", "/computes/")) == 1
