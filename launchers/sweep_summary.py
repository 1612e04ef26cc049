"""A sweep's summary: one table of every point's final metrics, as text, CSV and plot.

Written by the sweep launcher (``launchers/sweep_launcher.py``) after each
batch of points, from every point's run dir under the sweep dir
(``.hydra/hydra.yaml`` for its number and overrides, ``metrics.json`` or
``evaluation.json`` for its results). Reading the run dirs rather than the
launchers' return values means the summary is the same however the points
were run, covers every batch so far, and can be rebuilt later with
``python -m cifar_dist.launchers.sweep_summary <sweep dir>``.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf

from cifar_dist.common.atomic_files import atomic_path, new_figure, save_figure
from cifar_dist.common.results import Point, read_point
from cifar_dist.config.launcher_object import launcher_class
from cifar_dist.tracking.runfile import RUN_FILE, read_ref
from cifar_dist.tracking.sweep_parent import close_sweep

log = logging.getLogger(__name__)

CSV_NAME = "sweep_summary.csv"
PLOT_NAME = "sweep_summary.png"


def _saved_launcher(job_dir: Path) -> Dict[str, Any]:
    """The launcher node of the point's saved config (``.hydra/config.yaml``); {} when it cannot be read."""
    try:
        return OmegaConf.to_container(OmegaConf.load(job_dir / ".hydra" / "config.yaml").launcher)
    except (OSError, ValueError, AttributeError):
        return {}


def dry_run_writes(launcher: Dict[str, Any]) -> str:
    """What a dry run of this launcher node wrote: its class's ``dry_run_writes`` (``launchers/base.py``: "job"
    for a cluster's, "command" for the others), the class its ``_target_`` names; "command" when none can be found."""
    cls = launcher_class(launcher.get("_target_"))  # None: a point without a launcher node, or its class gone
    return str(getattr(cls, "dry_run_writes", "command"))


def dry_run_line(kinds: List[str], written: Optional[int] = None) -> str:
    """``dry run: N commands written, nothing started`` for dry runs that wrote these ``kinds`` (each point's
    launcher's ``dry_run_writes``: "command" or "job"); ``written`` commands when fewer than the points (a
    concurrent sweep runs k points per mpirun)."""
    nouns = set(kinds)
    noun = nouns.pop() if len(nouns) == 1 else "command/job"
    count = len(kinds) if written is None else written
    of = f" for {len(kinds)} points" if count != len(kinds) else ""
    return f"dry run: {count} {noun}{'s' if count != 1 else ''}{of} written, nothing started"


def commands_written(points: List[Point]) -> int:
    """How many commands (or jobs) the dry-run ``points`` wrote: one per point, except that points with one
    launcher config and ``launcher.concurrent=k`` (mpirun, Gloo) share one command per k of them."""
    groups: Dict[str, List[int]] = {}  # launcher config (or the point alone) -> [k, points]
    for point in points:
        launcher = _saved_launcher(point.output_dir)
        cluster = dry_run_writes(launcher) == "job"
        k = 0 if cluster else int(launcher.get("concurrent", 0) or 0)
        key = json.dumps(launcher, sort_keys=True, default=str) if k > 1 else str(point.output_dir)
        groups.setdefault(key, [k, 0])[1] += 1
    return sum(math.ceil(n / k) if k > 1 else n for k, n in groups.values())


def collect(sweep_dir: Path) -> List[Point]:
    points = [read_point(p.parent.parent) for p in Path(sweep_dir).rglob(".hydra/hydra.yaml")]
    points = sorted((p for p in points if p is not None), key=lambda p: (p.num, str(p.output_dir)))
    for point in points:
        ref = read_ref(point.output_dir / RUN_FILE)
        point.mlflow_run_id = ref.run_id if ref is not None else None
    return points


def varying_overrides(points: List[Point]) -> List[List[str]]:
    """Each point's overrides minus those every point shares (what the sweep varied)."""
    if not points:
        return []
    common = set(points[0].overrides).intersection(*(set(p.overrides) for p in points[1:]))
    return [[o for o in p.overrides if o not in common] or p.overrides for p in points]


def _fmt(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(points: List[Point]) -> str:
    labels = [" ".join(v) for v in varying_overrides(points)]
    header = ["#", "overrides", "status", "test_acc", "test_loss", "img/s", "wall_s", "ranks", "epochs"]
    rows = [
        [
            str(p.num),
            label,
            p.status,
            _fmt(p.test_accuracy, 4),
            _fmt(p.test_loss, 4),
            _fmt(p.images_per_sec, 1),
            _fmt(p.wall_time_s, 1),
            str(p.ranks or "-"),
            str(p.epochs_done),
        ]
        for p, label in zip(points, labels)
    ]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_csv(points: List[Point], path: Path) -> None:
    labels = varying_overrides(points)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:  # a reader never sees half a table
        writer = csv.writer(f)
        writer.writerow(
            [
                "job",
                "overrides",
                "varied",
                "status",
                "test_accuracy",
                "test_loss",
                "images_per_sec",
                "wall_time_s",
                "ranks",
                "epochs",
                "output_dir",
                "mlflow_run_id",
            ]
        )
        for p, varied in zip(points, labels):
            writer.writerow(
                [
                    p.num,
                    " ".join(p.overrides),
                    " ".join(varied),
                    p.status,
                    p.test_accuracy,
                    p.test_loss,
                    p.images_per_sec,
                    p.wall_time_s,
                    p.ranks,
                    p.epochs_done,
                    str(p.output_dir),
                    p.mlflow_run_id or "",
                ]
            )


def _numeric_axis(points: List[Point], labels: List[List[str]]):
    """(name, values) when the sweep varied exactly one numeric key, else None."""
    keys = {tuple(o.split("=", 1)[0] for o in v) for v in labels}
    if len(keys) != 1 or len(next(iter(keys))) != 1:
        return None
    try:
        values = [float(v[0].split("=", 1)[1]) for v in labels]
    except (ValueError, IndexError):
        return None
    return next(iter(keys))[0], values


def plot(points: List[Point], path: Path) -> None:
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib

    labels = varying_overrides(points)
    names = [" ".join(v) for v in labels]
    fig = new_figure(figsize=(12, 4.5))
    left, right = fig.subplots(1, 2)
    axis = _numeric_axis(points, labels)
    done = [(p, n) for p, n in zip(points, names) if p.test_accuracy is not None]
    if axis is not None:
        key, values = axis
        pairs = sorted((v, p.test_accuracy) for v, p in zip(values, points) if p.test_accuracy is not None)
        left.plot([v for v, _ in pairs], [a for _, a in pairs], "o-")
        if pairs and min(v for v, _ in pairs) > 0 and max(v for v, _ in pairs) / min(v for v, _ in pairs) >= 10:
            left.set_xscale("log")
        left.set_xlabel(key)
    else:
        left.bar(range(len(done)), [p.test_accuracy for p, _ in done])
        left.set_xticks(range(len(done)), [f"#{p.num}" for p, _ in done])
        left.set_xlabel("sweep point (see sweep_summary.csv)")
    left.set_ylabel("final test accuracy")
    left.set_title("test accuracy per point")
    for p, name in zip(points, names):
        epochs = [e["epoch"] for e in p.curve if "val_accuracy" in e]
        if epochs:
            right.plot(
                epochs,
                [e["val_accuracy"] for e in p.curve if "val_accuracy" in e],
                marker=".",
                label=f"#{p.num} {name}"[:60],
            )
    right.set_xlabel("epoch")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_ylabel("validation accuracy")
    right.set_title("learning curves")
    if right.lines:
        right.legend(fontsize="small")
    fig.tight_layout()
    save_figure(fig, path)


def summarize(sweep_dir: Path, out=None) -> List[Point]:
    """Print the table and write the CSV and plot into ``sweep_dir``."""
    out = out or sys.stdout
    sweep_dir = Path(sweep_dir)
    points = collect(sweep_dir)
    if not points:
        log.warning("sweep summary: no sweep points under %s", sweep_dir)
        return points
    text = table(points)
    print(f"\nSweep summary ({sweep_dir}):\n{text}\n", file=out, flush=True)
    write_csv(points, sweep_dir / CSV_NAME)
    try:
        plot(points, sweep_dir / PLOT_NAME)
    except Exception as exc:  # a missing plot must not hide the table and CSV
        log.warning("sweep summary plot failed: %s", exc)
    failed = [p for p in points if p.status not in ("ok", "dry_run")]

    close_sweep(sweep_dir, [p.num for p in failed])  # tracking=mlflow: the parent run gets the summary
    dry = [p for p in points if p.status == "dry_run"]
    if dry:
        kinds = [dry_run_writes(_saved_launcher(p.output_dir)) for p in dry]
        print(dry_run_line(kinds, commands_written(dry)), file=out, flush=True)
    if failed:
        log.warning(
            "%d of %d sweep points did not complete: %s",
            len(failed),
            len(points),
            ", ".join(f"#{p.num} ({p.status}, {p.output_dir})" for p in failed),
        )
    return points


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit(
            "usage: python -m cifar_dist.launchers.sweep_summary <sweep dir>   "
            "(rebuilds sweep_summary.csv/.png and prints the table)"
        )
    summarize(Path(sys.argv[1]))
