"""Batch scoring on Batch AI: ``task=evaluate launcher=batchai`` with the model
taken from an earlier Batch AI training run's outputs on the share, from a path
on the share, or uploaded from here; the scoring job's request validates against
the published schemas, and the results come back into the local run dir."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cifar_dist.launchers.base import LaunchError
from cifar_dist.launchers.batchai.config import conf_from_kwargs, resolve_settings
from cifar_dist.launchers.batchai.job import az_cluster_file, az_job_file
from cifar_dist.launchers.batchai.schema import cluster_schema_errors, schema_errors
from cifar_dist.launchers.batchai.scoring import plan_scoring
from helpers.cli import assert_ok, run_cli
from helpers.fake_azure.fixtures import cli_env, launcher_overrides

pytestmark = (
    pytest.mark.horovod
)  # the job's environment trains on Horovod (engine=auto: horovod), which the fake nodes run here


def _body(record) -> dict:
    return json.loads(record.body)


def _node_config(run_dir: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(run_dir / "batchai" / "job_config.yaml"), resolve=False)


def test_scoring_a_batchai_training_run_reads_its_outputs_on_the_share(fake_azure, storage_key, wheel_cache, tmp_path):
    """(a): evaluate.model is the local run dir of a Batch AI training launch. The
    scoring job runs on a new low-priority cluster at low scheduling priority."""
    env = cli_env(fake_azure, storage_key)
    train_dir, score_dir = tmp_path / "train", tmp_path / "score"
    assert_ok(run_cli(*launcher_overrides(fake_azure, train_dir, wheel_cache), env=env, cwd=tmp_path, timeout=60))
    (train_job,) = fake_azure.jobs()

    extra = {
        "task": "evaluate",
        "evaluate.model": str(train_dir),
        "launcher.cluster": "lowprio",
        "launcher.vm_priority": "lowpriority",
        "launcher.scheduling_priority": "low",
        "launcher.node_count": "1",
    }
    proc = run_cli(*launcher_overrides(fake_azure, score_dir, wheel_cache, **extra), env=env, cwd=tmp_path, timeout=60)
    assert_ok(proc)

    # The requests: a low-priority cluster, and a scoring job at low priority, both valid
    # against the service's published schemas.
    (cluster_put,) = fake_azure.arm_requests("PUT", "/clusters/lowprio")
    assert _body(cluster_put)["properties"]["vmPriority"] == "lowpriority"
    assert cluster_schema_errors(az_cluster_file(_body(cluster_put)["properties"])) == []
    score_create = fake_azure.job_creates()[-1]
    props = _body(score_create)["properties"]
    assert props["schedulingPriority"] == "low" and props["cluster"]["id"].endswith("/clusters/lowprio")
    assert schema_errors(az_job_file(props)) == []  # the published horovod.json (test_batchai_scheduling.py)

    # The nodes read the training job's outputs where training saved them; nothing was uploaded for it.
    train_outputs = fake_azure.batchai.run_dir(train_job)[1]
    node_cfg = _node_config(score_dir)
    assert node_cfg["task"]["name"] == "evaluate"
    assert node_cfg["evaluate"]["model"] == "${oc.env:AZ_BATCHAI_JOB_MOUNT_ROOT}/cifardist/" + train_outputs
    score_job = fake_azure.jobs()[-1]
    assert score_job.state == "succeeded", score_job.errors
    assert score_job.scored["model"] == f"{train_outputs}/saved_models/keras_cifar10_trained_model.h5"
    assert not [r for r in fake_azure.requests if r.method == "PUT" and "/models/" in r.path]
    assert f"is $AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist/{train_outputs} on the nodes" in proc.stdout

    # The results are in the scoring run dir; the user's own config still names the local dir.
    evaluation = json.loads((score_dir / "evaluation.json").read_text())
    assert evaluation["accuracy"] == 0.5 and evaluation["model"].startswith(train_outputs)
    assert (score_dir / "predictions.csv").read_text().startswith("index,label,predicted,confidence")
    assert (score_dir / "confusion_matrix.png").is_file()
    assert OmegaConf.load(score_dir / ".hydra" / "config.yaml").evaluate.model == str(train_dir)
    assert "the job wrote no" not in proc.stdout + proc.stderr
    # The key went nowhere but the job bodies' mount credentials.
    for path in score_dir.rglob("*"):
        assert not path.is_file() or storage_key.encode() not in path.read_bytes(), path
    assert storage_key not in proc.stdout + proc.stderr
    assert all(r in fake_azure.job_creates() for r in fake_azure.requests if storage_key in r.raw)


def test_a_scoring_sweep_uploads_a_local_model_and_reads_another_from_the_share(
    fake_azure, storage_key, wheel_cache, tmp_path
):
    """(b) and (c), as two scoring jobs submitted at once ("parallel execution"):
    a local .h5 uploaded with its job, and a model already on the share named
    by its node-side path; both score a local folder of images, uploaded once."""
    fake_azure.batchai.finish_after_jobs = 2
    local_model = tmp_path / "mine.h5"
    local_model.write_bytes(b"\x89HDF\r\n\x1a\n local model " + os.urandom(16))
    on_share = b"\x89HDF\r\n\x1a\n model put on the share by hand"
    fake_azure.files.write("cifardist", "cifar/models/manual/model.h5", on_share)
    images = tmp_path / "imgs"
    (images / "cat").mkdir(parents=True)
    (images / "cat" / "a.png").write_bytes(b"png a")
    (images / "b.png").write_bytes(b"png b")

    sweep_dir = tmp_path / "sweep"
    args = [
        "-m",
        f"evaluate.model={local_model},$AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist/cifar/models/manual/model.h5",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    extra = {"task": "evaluate", "evaluate.input": str(images), "launcher.node_count": "1"}
    args += [
        a
        for a in launcher_overrides(fake_azure, tmp_path / "unused", wheel_cache, **extra)
        if not a.startswith("hydra.run.dir")
    ]
    proc = run_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, timeout=90)
    assert_ok(proc)

    jobs = fake_azure.jobs()
    assert len(jobs) == 2 and all(j.state == "succeeded" for j in jobs), [j.errors for j in jobs]
    creates = [r for r in fake_azure.job_creates() if r.status == 202]
    assert all(r.at < min(j.finished_at for j in jobs) for r in creates)  # submitted together
    by_model = {j.scored["model_sha256"]: j for j in jobs}
    uploaded = by_model[hashlib.sha256(local_model.read_bytes()).hexdigest()]  # the uploaded bytes are the local file's
    assert uploaded.scored["model"].startswith("cifar/models/") and uploaded.scored["model"].endswith("/mine.h5")
    assert by_model[hashlib.sha256(on_share).hexdigest()].scored["model"] == "cifar/models/manual/model.h5"
    # The image folder went up once, with its structure, and both jobs read it there.
    (image_dir,) = {j.scored["input"] for j in jobs}
    assert image_dir.startswith("cifar/inputs/") and image_dir.endswith("/imgs")
    assert fake_azure.files.read("cifardist", f"{image_dir}/cat/a.png") == b"png a"
    for num in range(2):
        point = sweep_dir / str(num)
        assert json.loads((point / "evaluation.json").read_text())["accuracy"] == 0.5
        assert (point / "predictions.csv").is_file()
        assert schema_errors(json.loads((point / "job.json").read_text())) == []


def test_a_model_missing_on_the_share_fails_before_anything_is_submitted(
    fake_azure, storage_key, wheel_cache, tmp_path
):
    extra = {"task": "evaluate", "evaluate.model": "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist/cifar/jobs/nope/outputs"}
    proc = run_cli(
        *launcher_overrides(fake_azure, tmp_path / "run", wheel_cache, **extra),
        env=cli_env(fake_azure, storage_key),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    (line,) = [x for x in proc.stderr.splitlines() if "cifar_dist: error" in x]
    assert "evaluate.model: $AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist/cifar/jobs/nope/outputs" in line
    assert "no such run dir on the share" in line and "Traceback" not in proc.stderr
    assert fake_azure.job_creates() == [] and fake_azure.arm_requests("PUT", "/clusters/") == []


# --- what evaluate.model / evaluate.input mean on Batch AI, without any service -------------------


def _plan(tmp_path, share="cifardist", account="acct", **evaluate):
    conf = conf_from_kwargs(
        dict(subscription_id="s", resource_group="r", workspace="w", cluster="c", storage_account=account, share=share)
    )
    settings = resolve_settings(conf, {}, submit=False)
    cfg = OmegaConf.create({"task": {"name": "evaluate"}, "evaluate": {"input": "test", **evaluate}})
    return plan_scoring(cfg, settings, tmp_path)


def _batchai_run_dir(tmp_path, share="cifardist", account="acct"):
    run = tmp_path / "trained"
    (run / "batchai").mkdir(parents=True)
    (run / "job.json").write_text(
        json.dumps(
            {
                "properties": {
                    "horovodSettings": {
                        "commandLineArgs": "--config-dir x --config-name job_config "
                        "--run-dir $AZ_BATCHAI_JOB_MOUNT_ROOT/mnt/cifar/jobs/j-0/outputs"
                    },
                    "mountVolumes": {
                        "azureFileShares": [
                            {
                                "accountName": account,
                                "relativeMountPath": "mnt",
                                "azureFileUrl": f"https://{account}.file.core.windows.net/{share}",
                            }
                        ]
                    },
                }
            }
        )
    )
    return run


def test_the_three_kinds_of_model_map_to_share_paths(tmp_path):
    plan = _plan(tmp_path, model=str(_batchai_run_dir(tmp_path)))
    assert plan.model.path == "cifar/jobs/j-0/outputs" and plan.model.is_dir and plan.model.uploads == {}
    assert plan.node_values() == {"model": "${oc.env:AZ_BATCHAI_JOB_MOUNT_ROOT}/cifardist/cifar/jobs/j-0/outputs"}

    for written in (
        "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist//cifar/m.h5",
        "${oc.env:AZ_BATCHAI_JOB_MOUNT_ROOT}/cifardist/cifar/m.h5",
    ):
        plan = _plan(tmp_path, model=written)
        assert (plan.model.path, plan.model.is_dir, plan.model.uploads) == ("cifar/m.h5", False, {})

    local = tmp_path / "run" / "saved_models" / "keras_cifar10_trained_model.h5"
    local.parent.mkdir(parents=True)
    local.write_bytes(b"model")
    for given in ("run", str(local)):  # a local (non-Batch AI) run dir, relative to the cwd, or the file
        plan = _plan(tmp_path, model=given, input=str(local))
        ((remote, source),) = plan.model.uploads.items()
        assert source == local and remote == plan.model.path and remote.startswith("cifar/models/")
        assert plan.input.uploads == {plan.input.path: local}


@pytest.mark.parametrize(
    "evaluate, message",
    [
        ({"model": "$AZ_BATCHAI_JOB_MOUNT_ROOT/other/m.h5"}, "the job mounts only launcher.share=cifardist"),
        ({"model": "$HOME/m.h5"}, "must start with $AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist/"),
        ({"model": "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist/../x.h5"}, "'..' is not allowed"),
        ({"model": "nowhere.h5"}, "no such local file or run dir"),
        ({"model": "???"}, "task=evaluate needs evaluate.model"),
        ({"model": "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist/m.h5", "input": "batches/*"}, "globs are not expanded"),
        (
            {"model": "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist/m.h5", "input": "missing_dir"},
            "no such local file or folder",
        ),
    ],
)
def test_bad_scoring_paths_are_one_line_errors(tmp_path, evaluate, message):
    with pytest.raises(LaunchError) as info:
        _plan(tmp_path, **evaluate)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_run_dir_trained_on_another_share_names_the_settings_to_use(tmp_path):
    with pytest.raises(LaunchError, match="launcher.storage_account=acct2 launcher.share=models2"):
        _plan(tmp_path, model=str(_batchai_run_dir(tmp_path, share="models2", account="acct2")))
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(LaunchError, match="holds neither saved_models"):
        _plan(tmp_path, model=str(empty))


def test_the_node_resolves_the_share_path_from_its_own_environment(tmp_path):
    """The node config carries ${oc.env:AZ_BATCHAI_JOB_MOUNT_ROOT}: composed on a node
    (the variable set), evaluate.model is the mounted path."""
    from hydra import compose, initialize_config_module
    from omegaconf import open_dict

    from cifar_dist.all_options import register_configs
    from cifar_dist.launchers.batchai.scoring import apply_to_node_config
    from cifar_dist.launchers.batchai.staging import node_job_config

    register_configs()
    model = "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifardist/cifar/jobs/j-0/outputs"
    with initialize_config_module("cifar_dist.conf", version_base="1.3"):
        cfg = compose(
            "config",
            overrides=["launcher=batchai", "task=evaluate", f"evaluate.model={model}"],
            return_hydra_config=True,
        )
        choices = dict(cfg.hydra.runtime.choices)
        with open_dict(cfg):
            del cfg["hydra"]
    settings = resolve_settings(
        conf_from_kwargs(
            dict(subscription_id="s", resource_group="r", workspace="w", cluster="c", storage_account="a")
        ),
        {},
        submit=False,
    )
    plan = plan_scoring(cfg, settings, tmp_path)
    (tmp_path / "job_config.yaml").write_text(node_job_config(apply_to_node_config(cfg, plan), choices))
    node_env = {
        **os.environ,
        "CIFAR_DIST_CHILD": "1",
        "AZ_BATCHAI_JOB_MOUNT_ROOT": "/mnt/batch/tasks/shared/LS_root/mounts",
    }
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
            "--resolve",
        ],
        capture_output=True,
        text=True,
        env=node_env,
    )
    assert_ok(proc)
    node = OmegaConf.create(proc.stdout)
    assert node.evaluate.model == "/mnt/batch/tasks/shared/LS_root/mounts/cifardist/cifar/jobs/j-0/outputs"
    assert node.task._target_ == "cifar_dist.evaluation.task.evaluate"
