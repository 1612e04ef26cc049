"""A resume on another stack (issue 47, item 6): checkpoints written with one TensorFlow, Keras, JAX or Horovod are
not resumed with another without the user saying so; the refusal names the checkpoints' stack, and a resume that
goes on records both (cifar_dist/rundir/stack.py).

The other stack is simulated: the run dir's metrics.json says the checkpoints were written with another TensorFlow
(as a run of the current stack's says on the horovod stack), or Horovod is made unimportable for the command (as on
the current stack, for a run the horovod stack trained).
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from pathlib import Path

import pytest

from cifar_dist.rundir.lock import LOCK_NAME
from cifar_dist.rundir.stack import check_stack, keep_earlier_stack
from helpers.cli import assert_ok, compose_cfg, one_error_line, read_metrics, run_cli
from helpers.no_horovod import env_without_horovod

TENSORFLOW = importlib.metadata.version("tensorflow")
# The other stack's TensorFlow: the current stack's release on the horovod stack (2.18), the horovod stack's elsewhere.
OTHER_TENSORFLOW = "2.21.0" if TENSORFLOW.startswith("2.18.") else "2.18.1"


def snapshot(run_dir: Path) -> dict:
    return {
        str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != LOCK_NAME
    }


def written_with(run_dir: Path, **versions: str) -> dict:
    """Make ``run_dir``'s metrics.json say its checkpoints were written with ``versions``; returns its run record."""
    metrics = read_metrics(run_dir)
    metrics["run"].update(versions)
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    return metrics["run"]


@pytest.fixture
def resumable(half_run, tmp_path) -> Path:
    """A copy of ``half_run`` (one epoch of two) to change."""
    return Path(shutil.copytree(half_run, tmp_path / "run"))


@pytest.mark.both_stacks
def test_checkpoints_of_another_tensorflow_are_refused_naming_it_then_resumed_when_asked_with_both_recorded(
    resumable, half_run_overrides
):
    run = written_with(resumable, tensorflow=OTHER_TENSORFLOW)
    before = snapshot(resumable)
    line = one_error_line(run_cli(*half_run_overrides, f"hydra.run.dir={resumable}", timeout=120))
    assert line.startswith(
        f"cifar_dist: error: {resumable}'s checkpoints were written with TensorFlow {OTHER_TENSORFLOW}, "
        f"Keras {run['keras']}"
    ), line
    assert f"(engine={run['engine']}), this environment has TensorFlow {TENSORFLOW}: resume them on the stack" in line
    assert "trainer.resume_despite_changes=true to go on" in line
    after = snapshot(resumable)
    log = after.pop("cifar_dist.log").decode()
    assert after == {k: v for k, v in before.items() if k != "cifar_dist.log"}  # nothing written: not .hydra/
    assert log.startswith(before["cifar_dist.log"].decode()) and log.endswith(f"refused: {line[19:]}\n")  # why, noted

    going_on = run_cli(
        *half_run_overrides, "trainer.resume_despite_changes=true", f"hydra.run.dir={resumable}", timeout=300
    )
    assert_ok(going_on)
    assert f"going on with TensorFlow {TENSORFLOW} (trainer.resume_despite_changes=true)" in going_on.stderr
    metrics = read_metrics(resumable)
    assert metrics["resumed_from_epoch"] == 1 and metrics["complete"] and metrics["run"]["tensorflow"] == TENSORFLOW
    earlier = {k: run[k] for k in ("engine", "tensorflow", "keras", "jax", "horovod") if k in run}
    assert metrics["earlier_stacks"] == [{**earlier, "until_epoch": 1}]


def test_checkpoints_of_an_engine_this_environment_lacks_are_refused_naming_their_stack(
    resumable, half_run_overrides, tmp_path
):
    """The horovod stack's run resumed where Horovod is missing (the current stack): the line named neither the
    checkpoints nor their stack, and said "or leave engine unset", which the user had done."""
    run = read_metrics(resumable)["run"]
    if run["engine"] != "horovod":
        pytest.skip("half_run trained without Horovod here (the current stack)")
    env = env_without_horovod(tmp_path)
    for accept in ((), ("trainer.resume_despite_changes=true",)):  # no going on: the engine cannot start here
        line = one_error_line(run_cli(*half_run_overrides, *accept, f"hydra.run.dir={resumable}", env=env))
        assert line == (
            f"cifar_dist: error: {resumable}'s checkpoints were written with TensorFlow {run['tensorflow']}, "
            f"Keras {run['keras']}, Horovod {run['horovod']} (engine=horovod); this environment has no Horovod: "
            "resume them where it is installed (the stack they were written on, docs/install.md), or choose a new "
            "hydra.run.dir"
        )


def fake_run_dir(folder: Path, **run: str) -> Path:
    """A run dir with a checkpoint and a metrics.json whose run record says ``run``."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "checkpoint-001.h5").write_bytes(b"")
    (folder / "metrics.json").write_text(json.dumps({"run": run}))
    return folder


def test_a_patch_release_a_fresh_run_and_a_job_that_builds_its_own_environment_are_not_refused(tmp_path):
    patch = TENSORFLOW.rsplit(".", 1)[0] + ".99"
    check_stack(fake_run_dir(tmp_path / "patch", engine="tensorflow", tensorflow=patch), compose_cfg())
    other = fake_run_dir(tmp_path / "other", engine="tensorflow", tensorflow=OTHER_TENSORFLOW)
    with pytest.raises(Exception, match=f"written with TensorFlow {OTHER_TENSORFLOW} \\(engine=tensorflow\\)"):
        check_stack(other, compose_cfg())
    check_stack(other, compose_cfg("trainer.resume=false"))  # the run-dir guard refuses that in its own words
    check_stack(other, compose_cfg("task=evaluate", f"evaluate.model={other}"))
    check_stack(other, compose_cfg("launcher=azureml"))  # the job's stack is the environment Azure ML builds
    (other / "checkpoints" / "checkpoint-001.h5").unlink()
    check_stack(other, compose_cfg())  # nothing to resume


def test_a_resume_on_the_same_stack_records_no_earlier_one():
    run = {"engine": "jax", "tensorflow": "2.18.1", "keras": "3.15.1", "jax": "0.10.2", "lr_scaled": 0.1}
    metrics = {"run": {**run, "lr_scaled": 0.2}}
    keep_earlier_stack(metrics, run, 3)
    keep_earlier_stack(metrics, None, 3)  # a metrics.json without a run record
    keep_earlier_stack(metrics, {**run, "jax": "0.7.1"}, 0)  # a fresh start: nothing earlier
    assert "earlier_stacks" not in metrics
    keep_earlier_stack(metrics, {**run, "jax": "0.7.1"}, 3)
    keep_earlier_stack(metrics, {**run, "keras": "3.12.0"}, 5)
    assert metrics["earlier_stacks"] == [
        {"engine": "jax", "tensorflow": "2.18.1", "keras": "3.15.1", "jax": "0.7.1", "until_epoch": 3},
        {"engine": "jax", "tensorflow": "2.18.1", "keras": "3.12.0", "jax": "0.10.2", "until_epoch": 5},
    ]


def test_the_stack_a_run_starts_with_is_recorded_where_a_resume_reads_it_without_metrics_json(tmp_path):
    """Issue 57, item 7: with metrics.json gone, a resume crossed stacks silently (no ``earlier_stacks``); with it,
    the same resume was refused. The fingerprint file a resume always reads records the stack at the start."""
    from cifar_dist.rundir.fingerprint import FINGERPRINT
    from cifar_dist.rundir.resume_policy import record_start
    from cifar_dist.rundir.stack import StackChanged, started_stack

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = compose_cfg("engine=tensorflow", "data=sample")
    record_start(run_dir, cfg)  # a first start
    started = json.loads((run_dir / FINGERPRINT).read_text())["stack"]
    assert started == started_stack(cfg) and started["engine"] == "tensorflow" and started["tensorflow"] == TENSORFLOW
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "checkpoint-003.h5").write_bytes(b"")
    other = {**started, "tensorflow": OTHER_TENSORFLOW}  # as if the run had started on the other stack
    (run_dir / FINGERPRINT).write_text(json.dumps({**json.loads((run_dir / FINGERPRINT).read_text()), "stack": other}))
    with pytest.raises(StackChanged, match=f"checkpoints were written with TensorFlow {OTHER_TENSORFLOW}, Keras"):
        check_stack(run_dir, cfg)
    going_on = compose_cfg("engine=tensorflow", "data=sample", "trainer.resume_despite_changes=true")
    check_stack(run_dir, going_on)  # says so on stderr
    record_start(run_dir, going_on)
    kept = json.loads((run_dir / FINGERPRINT).read_text())
    assert kept["stack"] == started and kept["earlier_stacks"] == [{**other, "until_epoch": 3}]
    check_stack(run_dir, cfg)  # the checkpoints are this stack's from now on
    record_start(run_dir, cfg)
    assert json.loads((run_dir / FINGERPRINT).read_text()) == kept  # a resume on the same stack changes nothing


def test_a_real_run_records_the_stack_its_metrics_name_and_a_resume_without_metrics_json_is_refused(
    resumable, half_run_overrides
):
    from cifar_dist.rundir.fingerprint import FINGERPRINT
    from cifar_dist.rundir.stack import same_stack, stack_of

    fingerprint = json.loads((resumable / FINGERPRINT).read_text())
    assert same_stack(fingerprint["stack"], stack_of(read_metrics(resumable)["run"])), fingerprint["stack"]
    (resumable / "metrics.json").unlink()
    fingerprint["stack"]["tensorflow" if "tensorflow" in fingerprint["stack"] else "keras"] = "9.9.0"
    (resumable / FINGERPRINT).write_text(json.dumps(fingerprint))
    line = one_error_line(run_cli(*half_run_overrides, f"hydra.run.dir={resumable}", timeout=120))
    assert f"{resumable}'s checkpoints were written with " in line and " 9.9.0" in line, line
