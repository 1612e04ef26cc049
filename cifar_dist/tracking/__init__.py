"""Experiment tracking: every job (single run or sweep point) recorded as an MLflow run (docs/tracking.md).

``tracking=mlflow`` turns it on. Rank 0 records; the tracker can never make
a job fail (never_fail.py); the run id lives in the run dir (runfile.py) so a
resumed job continues its run; a run dir can be sent later with
``python -m cifar_dist.tracking import <run dir or sweep dir>``. MLflow is
imported only when tracking is on (the ``tracking`` extra), and with its
usage telemetry off unless the user set it (``settings.quiet_mlflow``).
"""
from cifar_dist.tracking.settings import quiet_mlflow

quiet_mlflow()  # before anything imports MLflow, which reads it once

from cifar_dist.tracking.job_hooks import after_download, after_job, import_run_dir, open_for_training  # noqa: E402

__all__ = ["after_download", "after_job", "import_run_dir", "open_for_training"]
