"""What a run dir says about how its job ended: the one home of the result files' names and reader.

A training run's rank 0 writes ``metrics.json`` (every epoch, then the test
scores); a ``task=evaluate`` run writes ``evaluation.json``. Launchers (to
report a result), the sweep launcher (to hand Hydra each point's accuracy)
and the sweep summary all read them through here.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, Optional

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
EVALUATION_FILE = "evaluation.json"


def read_json(path: Path) -> Optional[Dict[str, Any]]:
    """The file's JSON object, or None when it is missing or not (yet) valid JSON."""
    try:
        doc = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def read_metrics(run_dir: Path) -> Optional[Dict[str, Any]]:
    """A training run's metrics.json."""
    return read_json(Path(run_dir) / METRICS_FILE)


def read_evaluation(run_dir: Path) -> Optional[Dict[str, Any]]:
    """A task=evaluate run's evaluation.json."""
    return read_json(Path(run_dir) / EVALUATION_FILE)


def as_metrics(evaluation: Dict[str, Any]) -> Dict[str, Any]:
    """evaluation.json in the shape of metrics.json's final scores (``test.loss``, ``test.accuracy``)."""
    return {**evaluation, "test": {"loss": evaluation.get("loss"), "accuracy": evaluation.get("accuracy")}}


def read_results(run_dir: Path) -> Optional[Dict[str, Any]]:
    """The run's final results whatever its task: evaluation.json when there is one, else metrics.json."""
    evaluation = read_evaluation(run_dir)
    if evaluation is not None:
        return as_metrics(evaluation)
    return read_metrics(run_dir)


def final_accuracy(metrics: Optional[Dict[str, Any]]) -> Optional[float]:
    """The number a sweep optimises: the final test accuracy (evaluation accuracy for task=evaluate)."""
    test = (metrics or {}).get("test") or {}
    accuracy = test.get("accuracy")
    return None if accuracy is None else float(accuracy)
