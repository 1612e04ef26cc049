"""The run id kept in the run dir, so a resumed job (or an import) continues the same MLflow run."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from cifar_dist.common.atomic_files import atomic_write_text

RUN_FILE = "mlflow_run.json"  # in a job's run dir
SWEEP_FILE = "mlflow_sweep.json"  # in a sweep dir: the parent run of its points


@dataclass
class RunRef:
    tracking_uri: str  # without user:password
    experiment_id: str
    run_id: str


def read_ref(path: Path) -> Optional[RunRef]:
    """The reference saved at ``path``; None when there is none (or it is unreadable)."""
    try:
        data = json.loads(Path(path).read_text("utf-8"))
        return RunRef(str(data["tracking_uri"]), str(data["experiment_id"]), str(data["run_id"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_ref(path: Path, ref: RunRef) -> None:
    atomic_write_text(Path(path), json.dumps(asdict(ref), indent=2) + "\n")
