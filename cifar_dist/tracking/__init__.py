"""Experiment tracking: every job (single run or sweep point) recorded as an MLflow run (docs/tracking.md).

``tracking=mlflow`` turns it on. Rank 0 records; the tracker can never make
a job fail (failure_guard.py); the run id lives in the run dir (runfile.py) so a
resumed job continues its run; a run dir can be sent later with
``python -m cifar_dist.tracking import <run dir or sweep dir>``. MLflow is
imported only when tracking is on (the ``tracking`` extra), and with its
usage telemetry off unless the user set it (``settings.quiet_mlflow``).

What a job calls is in ``job_hooks.py`` (``open_for_training``, ``after_job``,
``after_download``, ``import_run_dir``); this package module re-exports
nothing, so no module of the package imports it back through its own name.
"""

from cifar_dist.tracking.settings import quiet_mlflow

quiet_mlflow()  # before anything imports MLflow, which reads it once
