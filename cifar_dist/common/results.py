"""What a run dir says about how its job ended: the one home of the result files' names and reader.

A training run's rank 0 writes ``metrics.json`` (every epoch, then the test
scores); a ``task=evaluate`` run writes ``evaluation.json``. Launchers (to
report a result), the sweep launcher (to hand Hydra each point's accuracy),
the sweep summary, tracking, the benchmarks and the Slurm batch script
(``python -m cifar_dist.common.results unfinished <run dir>``) all read them through
here, with one rule: a run dir holding both reports evaluation.json (a
``task=evaluate`` written into a training run dir scored it after training).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from omegaconf import OmegaConf

from cifar_dist.common.redaction import redact_text

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
EVALUATION_FILE = "evaluation.json"


def load_json(path: Path) -> Any:
    """The file's JSON; OSError or ValueError when it cannot be read or parsed (for a caller that reports why)."""
    return json.loads(Path(path).read_text("utf-8"))


def read_json(path: Path) -> Optional[Dict[str, Any]]:
    """The file's JSON object, or None when it is missing or not (yet) valid JSON."""
    try:
        doc = load_json(path)
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


def read_results_or_warn(run_dir: Path) -> Optional[Dict[str, Any]]:
    """read_results, with a warning when the run dir holds neither result (a job that ended early)."""
    results = read_results(run_dir)
    if results is None:
        log.warning("the job wrote no readable %s or %s in %s", METRICS_FILE, EVALUATION_FILE, run_dir)
    return results


def training_complete(run_dir: Path) -> bool:
    """Whether the run's metrics.json says training finished (False while it is missing or unfinished)."""
    return bool((read_metrics(run_dir) or {}).get("complete", False))


def finished_run(run_dir: Path, processes: int, planned: Callable[[int], int]) -> Optional[Dict[str, Any]]:
    """metrics.json when it records this run finished on ``processes`` processes, with the epochs ``planned`` for
    the ranks it had (a rank is a device: the launcher knows its processes, the run its ranks); else None."""
    metrics = read_metrics(run_dir) or {}
    run, ranks = metrics.get("run") or {}, metrics.get("ranks")
    same_processes = metrics.get("processes", ranks) == processes  # (metrics.json before devices were ranks)
    done = metrics.get("complete") and ranks and same_processes and run.get("epochs") == planned(int(ranks))
    return metrics if done else None


def final_accuracy(metrics: Optional[Dict[str, Any]]) -> Optional[float]:
    """The number a sweep optimises: the final test accuracy (evaluation accuracy for task=evaluate)."""
    test = (metrics or {}).get("test") or {}
    accuracy = test.get("accuracy")
    return None if accuracy is None else float(accuracy)


@dataclass
class Point:
    num: int
    output_dir: Path
    overrides: List[str]
    status: str  # ok | incomplete | failed | dry_run
    test_accuracy: Optional[float] = None
    test_loss: Optional[float] = None
    images_per_sec: Optional[float] = None
    wall_time_s: Optional[float] = None
    ranks: Optional[int] = None
    epochs_done: int = 0
    mlflow_run_id: Optional[str] = None  # tracking=mlflow: the point's run (mlflow_run.json), set by the sweep summary
    curve: List[Dict[str, Any]] = field(default_factory=list)  # metrics.json "epochs"


def read_point(job_dir: Path) -> Optional[Point]:
    """One sweep point from its run dir (None when it is not a Hydra job dir)."""
    try:
        hydra_cfg = OmegaConf.load(job_dir / ".hydra" / "hydra.yaml").hydra
    except (OSError, ValueError):
        return None
    num = int(OmegaConf.select(hydra_cfg, "job.num", default=0) or 0)
    # masked: the table, the CSV and the tracker's parent run show them
    overrides = [redact_text(str(o)) for o in OmegaConf.select(hydra_cfg, "overrides.task", default=[]) or []]
    point = Point(num=num, output_dir=job_dir, overrides=overrides, status="dry_run" if _dry_run(job_dir) else "failed")
    evaluation = read_evaluation(job_dir)
    if evaluation is not None:  # a task=evaluate point: scoring results, no training curve
        point.status = "ok"
        point.test_accuracy = evaluation.get("accuracy")
        point.test_loss = evaluation.get("loss")
        point.wall_time_s = evaluation.get("wall_time_s")
        point.ranks = evaluation.get("ranks")
        return point
    metrics = read_metrics(job_dir)
    if metrics is None:
        return point
    test = metrics.get("test") or {}
    point.status = "ok" if metrics.get("complete") else "incomplete"
    point.test_accuracy = test.get("accuracy")
    point.test_loss = test.get("loss")
    point.images_per_sec = metrics.get("images_per_sec")
    point.wall_time_s = metrics.get("wall_time_s")
    point.ranks = metrics.get("ranks")
    point.curve = list(metrics.get("epochs") or [])
    point.epochs_done = max([int(e.get("epoch", 0)) for e in point.curve] + [0])
    return point


def _dry_run(job_dir: Path) -> bool:
    """The point was launched with ``launcher.dry_run=true``: its command or job was written, not run."""
    try:
        return bool(OmegaConf.select(OmegaConf.load(job_dir / ".hydra" / "config.yaml"), "launcher.dry_run"))
    except (OSError, ValueError):
        return False


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m cifar_dist.common.results unfinished RUN_DIR``: exit 0 when training in RUN_DIR is not finished.

    The Slurm batch script asks this after the stop signal, to decide whether to requeue its job.
    """
    parser = argparse.ArgumentParser(
        prog="python -m cifar_dist.common.results", description=main.__doc__.splitlines()[0]
    )
    parser.add_argument("question", choices=["unfinished"])
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args(argv)
    return 1 if training_complete(args.run_dir) else 0


if __name__ == "__main__":
    sys.exit(main())
