"""Files the trainer leaves in the run dir besides checkpoints: metrics.json's resume, the CSV log, the plot.

They are written through cifar_dist.common.atomic_files (atomic) and read through cifar_dist.common.results.
"""

from __future__ import annotations

import csv
import io
import logging
import shutil
from pathlib import Path
from typing import Any, Dict, List

from cifar_dist.common.atomic_files import atomic_write_text, new_figure, save_figure
from cifar_dist.common.results import load_json


def trim_csv_log(path: Path, epochs_done: int) -> None:
    """Keep the rows of the CSV log (1-based ``epoch``) for the first ``epochs_done`` epochs only.

    A run killed after logging an epoch but before checkpointing it redoes
    that epoch on resume; without this its row would appear twice. A log of
    an earlier version (Keras' 0-based numbering, first row ``0``) is
    renumbered, so the rows the resumed run appends continue it.
    """
    if not path.is_file():
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or "epoch" not in rows[0]:
        return
    col = rows[0].index("epoch")
    data = [r for r in rows[1:] if len(r) > col and r[col].isdigit()]
    shift = 1 if data and data[0][col] == "0" else 0
    kept = [rows[0]] + [
        r[:col] + [str(int(r[col]) + shift)] + r[col + 1 :] for r in data if int(r[col]) + shift <= epochs_done
    ]
    if kept == rows:
        return
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(kept)
    atomic_write_text(path, out.getvalue())


def read_metrics_to_resume(path: Path) -> Dict[str, Any]:
    """metrics.json of the run being resumed; {} when it is missing or damaged.

    A damaged record must not block a resume whose checkpoint loads (a
    damaged checkpoint is skipped too): it is copied to
    ``<name>.damaged`` for the user, reported, and a new record starts
    (the per-epoch numbers are also in training_log.csv).
    """
    if not path.is_file():
        return {}
    try:
        metrics = load_json(path)
        epochs = metrics.get("epochs", []) if isinstance(metrics, dict) else None
        if not isinstance(epochs, list) or not all(
            isinstance(e, dict) and isinstance(e.get("epoch"), int) for e in epochs
        ):
            raise ValueError("not a cifar_dist metrics record")
        return metrics
    except (OSError, ValueError) as exc:
        kept = path.with_name(path.name + ".damaged")
        shutil.copyfile(path, kept)
        logging.getLogger(__name__).warning(
            "%s is damaged (%s); kept as %s, starting a new record", path, str(exc).splitlines()[0], kept.name
        )
        return {}


def plot_learning_curves(epochs: List[Dict[str, Any]], path: Path, title: str = "") -> None:
    """Loss and accuracy per epoch, train and validation, as a PNG."""
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib

    fig = new_figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    for ax, key, label in ((axes[0], "loss", "loss"), (axes[1], "accuracy", "accuracy")):
        for prefix, style in (("", "-"), ("val_", "--")):
            # Epochs without validation (trainer.validate_every) have no val_ numbers: the line joins those that do.
            points = [(e["epoch"], e[prefix + key]) for e in epochs if e.get(prefix + key) is not None]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, style, marker="o", markersize=3, label=("validation " if prefix else "train ") + label)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs, never 1.5
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)
