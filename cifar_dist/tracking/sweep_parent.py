"""A sweep's points grouped under one parent MLflow run, kept in the sweep dir.

The first point to open its run creates the parent (under a file lock, as
points may start side by side: ``launcher.concurrent``, cluster jobs) and
saves its id in ``<sweep dir>/mlflow_sweep.json``; every point's run names
it as ``mlflow.parentRunId``, so MLflow's UI shows the points nested under
the sweep. Nothing depends on how the sweep was launched: only the sweep
dir, read from each point's ``.hydra/hydra.yaml``.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Sequence

from cifar_dist.tracking.client import client_for, run_exists
from cifar_dist.tracking.failure_guard import Guard
from cifar_dist.tracking.runfile import SWEEP_FILE, RunRef, read_ref, write_ref
from cifar_dist.tracking.settings import redact

LOCK_FILE = ".mlflow_sweep.lock"
SUMMARY_FILES = ("sweep_summary.csv", "sweep_summary.png")


def sweep_parent(client, uri: str, experiment_id: str, sweep_dir: Path) -> str:
    """The parent run's id for ``sweep_dir`` at ``uri``, created by the first point that asks."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        ref = read_ref(sweep_dir / SWEEP_FILE)
        if ref is not None and ref.tracking_uri == redact(uri) and run_exists(client, ref.run_id):
            return ref.run_id
        run = client.create_run(
            experiment_id,
            run_name=f"sweep {'/'.join(sweep_dir.parts[-2:])}",
            tags={"sweep_dir": str(sweep_dir.absolute()), "kind": "sweep"},
        )
        write_ref(sweep_dir / SWEEP_FILE, RunRef(redact(uri), experiment_id, run.info.run_id))
        return run.info.run_id


def close_sweep(sweep_dir: Path, failed_points: Sequence[int], interrupted: bool = False) -> None:
    """The sweep's summary as the parent run's artifacts; the parent FINISHED, FAILED when a point failed,
    KILLED when the sweep was interrupted (Ctrl-C)."""
    ref = read_ref(Path(sweep_dir) / SWEEP_FILE)
    if ref is None:
        return
    guard = Guard(ref.tracking_uri, sweep_dir)

    def close() -> None:
        client = client_for(ref.tracking_uri)
        for name in SUMMARY_FILES:
            if (Path(sweep_dir) / name).is_file():
                client.log_artifact(ref.run_id, str(Path(sweep_dir) / name))
        if failed_points:
            client.set_tag(ref.run_id, "failed_points", ",".join(str(n) for n in failed_points))
        status = "KILLED" if interrupted else "FAILED" if failed_points else "FINISHED"
        client.set_terminated(ref.run_id, status=status)

    guard.call("closing the sweep's parent run", close)
