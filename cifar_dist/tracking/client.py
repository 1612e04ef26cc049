"""The MLflow client for a tracking URI, and whether a run is still there: what store.py and sweep_parent.py share."""
from __future__ import annotations


def client_for(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def run_exists(client, run_id: str) -> bool:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except MlflowException:
        return False
