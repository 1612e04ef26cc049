"""Where the rest of cifar_dist calls the tracker: each entry point is guarded and does nothing with tracking=none.

* ``open_for_training``: rank 0 of a training job, before ``fit`` (trainer.py);
* ``after_job``: the launching process once a job has ended (app.py): a
  failed job's run is marked FAILED, an evaluate job is recorded;
* ``after_download``: a cluster launcher once a job's outputs are local
  (Batch AI's monitor; Slurm and Azure ML the same way): one call;
* ``import_run_dir``: ``python -m cifar_dist.tracking import <run dir>``.
"""

from __future__ import annotations

import gc
import logging
import socket
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import DictConfig

from cifar_dist.common.results import EVALUATION_FILE
from cifar_dist.tracking import run_description as describe
from cifar_dist.tracking.failure_guard import Guard
from cifar_dist.tracking.runfile import RUN_FILE, read_ref
from cifar_dist.tracking.settings import apply_http_limits, redact, resolve_uri, tracking_conf
from cifar_dist.tracking.store import TrackedRun, status_of

log = logging.getLogger("cifar_dist.tracking")


class TrainingTracker:
    """Rank 0's side of a tracked training job: a Keras callback per epoch, ``finish`` at the end."""

    def __init__(self, guard: Guard, run, run_dir: Path, log_model: bool):
        self.guard = guard
        self.run = run  # store.TrackedRun, None when opening it failed
        self.run_dir = run_dir
        self.log_model = log_model

    def callback(self):
        from cifar_dist.tracking.callback import EpochMetricsLogger  # lazy: TensorFlow

        return EpochMetricsLogger(self.log_epoch)

    def log_epoch(self, record: Dict[str, Any]) -> None:
        if self.run is not None:
            self.guard.call(f"logging epoch {record['epoch']}", self.run.log_epoch, record)

    def finish(self, metrics: Dict[str, Any]) -> None:
        """After metrics.json and the saved model are written: fill gaps, test metrics, artifacts, status."""
        if self.run is not None:
            self.guard.call(
                "recording the run's results", _record_results, self.run, self.run_dir, metrics, self.log_model, False
            )


def open_for_training(
    cfg: DictConfig, run_dir: Path, ranks: int, engine: Optional[Dict[str, str]] = None
) -> Optional[TrainingTracker]:
    """Rank 0: the job's run opened (or reopened after a resume); None with tracking=none. ``engine``: the engine
    that trains and its versions, tagged on the run (``run_description.live_tags``)."""
    conf = tracking_conf(cfg)
    if conf is None:
        return None
    apply_http_limits(conf)
    uri = resolve_uri(conf.uri)
    guard = Guard(redact(uri), run_dir)
    job = describe.load_job(run_dir, cfg)

    run = guard.call(
        "opening the run",
        TrackedRun.open,
        uri,
        conf.experiment,
        job,
        describe.live_tags(socket.gethostname(), ranks, engine),
    )
    if run is not None:
        log.info("tracking: MLflow run %s at %s", run.run_id, redact(uri))
    return TrainingTracker(guard, run, Path(run_dir), bool(conf.log_model))


def after_job(cfg: DictConfig, run_dir: Path, ok: bool, interrupted: bool = False) -> None:
    """The launching process, after a job: FAILED for a failed job, KILLED for one interrupted (Ctrl-C),
    an evaluate job's results recorded.

    A training job that succeeded recorded itself (rank 0); one submitted to
    a cluster is recorded by ``after_download`` when its outputs arrive.
    """
    conf = tracking_conf(cfg)
    if conf is None:
        return
    if interrupted:
        # An MLflow write that Ctrl-C cut short leaves its SQLite connection, holding the write lock, to the
        # garbage collector: without this every later write waits out SQLite's busy timeout and fails.
        gc.collect()
    run_dir = Path(run_dir)
    if ok and ((run_dir / RUN_FILE).exists() or not (run_dir / EVALUATION_FILE).exists()):
        return
    guard = Guard(redact(resolve_uri(conf.uri)), run_dir)
    guard.call("recording the job's end", import_run_dir, run_dir, cfg=cfg, failed=not ok, interrupted=interrupted)


def after_download(run_dir: Path, succeeded: bool) -> None:
    """A cluster job's outputs are in ``run_dir``: send them to the tracker its config names (tracking=mlflow only)."""
    job = describe.load_job(run_dir)
    conf = tracking_conf(job.config)
    if conf is None:
        return
    guard = Guard(redact(resolve_uri(conf.uri)), run_dir)
    guard.call("importing the downloaded run dir", import_run_dir, run_dir, failed=not succeeded)


def import_run_dir(
    run_dir: Path,
    uri: Optional[str] = None,
    cfg: Optional[DictConfig] = None,
    failed: bool = False,
    interrupted: bool = False,
) -> str:
    """Send a run dir to the tracker, as its job would have: run, params, tags, every epoch, artifacts, status.

    Idempotent: the run the run dir names (``mlflow_run.json``) is reused
    when it exists at that URI, and only the epochs it lacks are sent.
    URI: ``uri``, else the one the run dir recorded, else the job's config.
    Returns the run id.
    """
    job = describe.load_job(Path(run_dir), cfg)
    conf = tracking_conf(job.config)
    experiment = str(conf.experiment) if conf is not None else "cifar_dist"
    if conf is not None:
        apply_http_limits(conf)
    ref = read_ref(job.run_dir / RUN_FILE)
    uri = uri or (ref.tracking_uri if ref is not None else resolve_uri(conf.uri if conf is not None else None))
    run = TrackedRun.open(uri, experiment, job, {"imported": "true"})
    results = job.results
    _record_results(run, job.run_dir, results, bool(conf.log_model) if conf is not None else True, failed, interrupted)
    return run.run_id


def _record_results(
    run, run_dir: Path, results: Dict[str, Any], log_model: bool, failed: bool, interrupted: bool = False
) -> None:
    if results.get("ranks"):
        run.set_tags({"ranks": str(results["ranks"])})
    run.sync(results)
    run.log_artifacts(Path(run_dir), log_model)
    run.end(status_of(results, failed, interrupted))
