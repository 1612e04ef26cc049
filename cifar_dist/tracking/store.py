"""One job's MLflow run: open (or reopen) it, log epochs, fill gaps from the run dir, log artifacts, end it.

Only this module (and sweep_parent.py, both through client.py) talks to MLflow, through ``MlflowClient``
with an explicit tracking URI and run id: no global active run, so nothing
lingers between the points of an in-process sweep.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Tuple

from cifar_dist.common.redaction import redact_text
from cifar_dist.common.results import EVALUATION_FILE, METRICS_FILE
from cifar_dist.tracking import run_description as describe
from cifar_dist.tracking.client import client_for, run_exists
from cifar_dist.tracking.runfile import RUN_FILE, RunRef, read_ref, write_ref
from cifar_dist.tracking.settings import artifact_location, redact
from cifar_dist.tracking.sweep_parent import sweep_parent

# MLflow's log_batch limits per request.
MAX_METRICS, MAX_PARAMS, MAX_TAGS = 1000, 100, 100
# Top-level run-dir files kept as artifacts (what exists of them).
ARTIFACT_FILES = (
    METRICS_FILE,
    EVALUATION_FILE,
    "training_log.csv",
    "learning_curves.png",
    "confusion_matrix.png",
    "predictions.csv",
)
ARTIFACT_DIRS = (".hydra",)  # as masked copies
MODEL_DIR = "saved_models"
TEXT_SUFFIXES = (".json", ".csv", ".yaml", ".yml", ".log", ".txt")  # uploaded with their secrets masked


def ensure_experiment(client, name: str, uri: str) -> str:
    """The experiment's id, created on first use (beside a SQLite store, its artifacts too)."""
    from mlflow.exceptions import MlflowException  # lazy: MLflow

    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location(uri))
    except MlflowException:  # another point created it just now
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


class TrackedRun:
    """The MLflow run of one run dir."""

    def __init__(self, client, ref: RunRef):
        self.client = client
        self.ref = ref

    @property
    def run_id(self) -> str:
        return self.ref.run_id

    @classmethod
    def open(cls, uri: str, experiment: str, job: describe.JobRecord, extra_tags: Dict[str, str]) -> TrackedRun:
        """The run this run dir already has at ``uri`` (set RUNNING again), else a new one, saved in the run dir."""
        client = client_for(uri)
        ref = read_ref(job.run_dir / RUN_FILE)
        tags = {**describe.tags(job), **extra_tags}
        if ref is not None and ref.tracking_uri == redact(uri) and run_exists(client, ref.run_id):
            client.update_run(ref.run_id, status="RUNNING")
        else:
            experiment_id = ensure_experiment(client, experiment, uri)
            sweep = describe.sweep_dir(job)
            if sweep is not None:
                tags["mlflow.parentRunId"] = sweep_parent(client, uri, experiment_id, sweep)
            created = client.create_run(experiment_id, tags={}, run_name=describe.run_name(job))
            ref = RunRef(redact(uri), experiment_id, created.info.run_id)
            write_ref(job.run_dir / RUN_FILE, ref)
        run = cls(client, ref)
        run.log_params(describe.params(job.config))
        run.set_tags(tags)
        return run

    def log_params(self, params: Dict[str, str]) -> None:
        """Params not logged yet (a resumed job may change a few, e.g. max_epochs_per_run: MLflow keeps the first)."""
        from mlflow.entities import Param  # lazy: MLflow

        have = self.client.get_run(self.run_id).data.params
        new = [Param(k, v) for k, v in params.items() if k not in have]
        for chunk in _chunks(new, MAX_PARAMS):
            self.client.log_batch(self.run_id, params=chunk)

    def set_tags(self, tags: Dict[str, str]) -> None:
        from mlflow.entities import RunTag  # lazy: MLflow

        for chunk in _chunks([RunTag(k, redact_text(str(v))) for k, v in tags.items()], MAX_TAGS):
            self.client.log_batch(self.run_id, tags=chunk)

    def log_epoch(self, record: Dict[str, Any]) -> None:
        """One epoch's metrics (loss, accuracy, val_*, lr, images_per_sec, ...) at step = epoch."""
        self._log(epoch_metrics([record]))

    def sync(self, results: Dict[str, Any]) -> int:
        """Log every epoch of ``results`` (metrics.json) the run lacks, and the final metrics; how many were sent."""
        wanted = epoch_metrics(results.get("epochs") or [])
        keys = {key for key, _, _ in wanted}
        have = {key: {m.step for m in self.client.get_metric_history(self.run_id, key)} for key in keys}
        missing = [(key, value, step) for key, value, step in wanted if step not in have[key]]
        final = final_metrics(results)
        self._log(missing + final)
        return len(missing) + len(final)

    def log_artifacts(self, run_dir: Path, log_model: bool) -> None:
        """The run dir's results, ``.hydra/`` and the model; text files as copies with their secrets masked."""
        with tempfile.TemporaryDirectory(prefix="cifar_dist-artifacts-") as staging:
            for name in ARTIFACT_FILES:
                if (run_dir / name).is_file():
                    self.client.log_artifact(self.run_id, str(redacted_copy(run_dir / name, Path(staging) / name)))
            for name in ARTIFACT_DIRS:
                if (run_dir / name).is_dir():
                    for path in sorted((run_dir / name).rglob("*")):
                        if path.is_file():
                            redacted_copy(path, Path(staging) / name / path.relative_to(run_dir / name))
                    self.client.log_artifacts(self.run_id, str(Path(staging) / name), artifact_path=name)
        if log_model and (run_dir / MODEL_DIR).is_dir():
            self.client.log_artifacts(self.run_id, str(run_dir / MODEL_DIR), artifact_path=MODEL_DIR)

    def end(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)

    def _log(self, metrics: List[Tuple[str, float, int]]) -> None:
        from mlflow.entities import Metric  # lazy: MLflow

        now = int(time.time() * 1000)
        entities = [Metric(key, value, now, step) for key, value, step in metrics]
        for chunk in _chunks(entities, MAX_METRICS):
            self.client.log_batch(self.run_id, metrics=chunk)


def redacted_copy(source: Path, target: Path) -> Path:
    """``source`` copied to ``target``; a text file with every secret masked (``.hydra/`` holds the overrides)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.suffix not in TEXT_SUFFIXES:
        shutil.copyfile(source, target)
        return target
    text = source.read_text("utf-8", errors="replace")
    target.write_text(redact_text(text), "utf-8")
    return target


def epoch_metrics(epochs: Iterable[Dict[str, Any]]) -> List[Tuple[str, float, int]]:
    """(key, value, step=epoch) for every number of every epoch record."""
    out = []
    for record in epochs:
        step = int(record["epoch"])
        out += [(k, float(v), step) for k, v in record.items() if k != "epoch" and _is_number(v)]
    return out


def final_metrics(results: Dict[str, Any]) -> List[Tuple[str, float, int]]:
    """test_loss/test_accuracy (train's ``test``, evaluate's top level), median img/s, wall time at the last epoch."""
    epochs = results.get("epochs") or []
    step = max([int(e["epoch"]) for e in epochs] + [0])
    test = results.get("test") or {k: results.get(k) for k in ("loss", "accuracy")}
    values = {
        "test_loss": test.get("loss"),
        "test_accuracy": test.get("accuracy"),
        "images_per_sec_median": results.get("images_per_sec"),
        "wall_time_s": results.get("wall_time_s"),
    }
    return [(k, float(v), step) for k, v in values.items() if _is_number(v)]


def status_of(results: Dict[str, Any], failed: bool, interrupted: bool = False) -> str:
    """KILLED when interrupted (Ctrl-C) or stopped early (it resumes into the same run); FAILED for a job that
    failed; FINISHED when complete."""
    if interrupted:
        return "KILLED"
    if failed:
        return "FAILED"
    return "KILLED" if results.get("complete") is False else "FINISHED"  # evaluation.json has no "complete"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _chunks(items: List[Any], size: int) -> Iterable[List[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
