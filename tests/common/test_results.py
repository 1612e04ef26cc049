"""cifar_dist.common.results: one reader of a run dir's result files, one rule, the same answer everywhere."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cifar_dist.common import results
from cifar_dist.launchers.slurm.monitor import SlurmJob
from cifar_dist.launchers.sweep_summary import read_point
from cifar_dist.tracking.run_description import load_job
from helpers.paths import REPO

TRAINED = {"epochs": [{"epoch": 1, "loss": 1.5}], "complete": True, "ranks": 2, "test": {"loss": 1.1, "accuracy": 0.61}}
SCORED = {"loss": 0.9, "accuracy": 0.72, "ranks": 1}


def run_dir_with(tmp_path: Path, metrics=None, evaluation=None) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "hydra.yaml").write_text("hydra:\n  job:\n    num: 0\n  overrides:\n    task: []\n")
    if metrics is not None:
        (run_dir / results.METRICS_FILE).write_text(json.dumps(metrics))
    if evaluation is not None:
        (run_dir / results.EVALUATION_FILE).write_text(json.dumps(evaluation))
    return run_dir


def slurm_job_reading(run_dir: Path, task: str) -> SlurmJob:
    job = SlurmJob.__new__(SlurmJob)  # only what reading the result needs: no client, no job
    job.output_dir, job.task, job.name = run_dir, task, "Slurm job 1"
    return job


@pytest.mark.parametrize("task", ["train", "evaluate"])
def test_a_run_dir_with_both_files_gives_the_same_accuracy_to_every_reader(tmp_path, task):
    run_dir = run_dir_with(tmp_path, TRAINED, SCORED)
    expected = 0.72  # evaluation.json: the scores written after training
    assert results.final_accuracy(results.read_results(run_dir)) == expected
    assert results.final_accuracy(load_job(run_dir).results) == expected  # tracking
    assert read_point(run_dir).test_accuracy == expected  # the sweep summary
    assert results.final_accuracy(slurm_job_reading(run_dir, task)._metrics()) == expected
    assert results.final_accuracy(results.read_results_or_warn(run_dir)) == expected  # Azure ML, Batch AI


def test_one_file_is_read_as_it_is(tmp_path):
    trained = run_dir_with(tmp_path / "a", metrics=TRAINED)
    scored = run_dir_with(tmp_path / "b", evaluation=SCORED)
    assert load_job(trained).results == results.read_results(trained) == TRAINED
    assert results.final_accuracy(load_job(scored).results) == 0.72
    assert slurm_job_reading(scored, "evaluate")._metrics()["test"] == {"loss": 0.9, "accuracy": 0.72}


def test_missing_or_damaged_results_read_as_none_and_warn(tmp_path, caplog):
    run_dir = run_dir_with(tmp_path)
    (run_dir / results.METRICS_FILE).write_text('{"epochs": [')
    assert results.read_results(run_dir) is None and load_job(run_dir).results == {}
    assert results.read_results_or_warn(run_dir) is None
    assert "the job wrote no readable metrics.json or evaluation.json" in caplog.text
    with pytest.raises(ValueError):
        results.load_json(run_dir / results.METRICS_FILE)  # for the caller that reports why (a resume)


@pytest.mark.parametrize(
    "metrics, unfinished", [(None, True), ({"complete": False}, True), ({"complete": True}, False)]
)
def test_the_batch_scripts_question_unfinished(tmp_path, metrics, unfinished):
    run_dir = run_dir_with(tmp_path, metrics=metrics)
    proc = subprocess.run(
        [sys.executable, "-m", "cifar_dist.common.results", "unfinished", str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == (0 if unfinished else 1), proc.stderr
    assert results.training_complete(run_dir) is not unfinished
