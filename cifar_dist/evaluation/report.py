"""Numbers and files of an evaluation, computed from per-image predictions.

Everything here works on the *gathered* predictions of all ranks, so the
counts (accuracy, per-class accuracy, confusion matrix) are exactly those
of a single-rank run, whatever the number of ranks.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Dict, Sequence

import numpy as np

from cifar_dist.common.atomic_files import atomic_write_text, new_figure, save_figure


def summarize(
    labels: np.ndarray, predicted: np.ndarray, losses: np.ndarray, class_names: Sequence[str]
) -> Dict[str, Any]:
    """Loss, accuracy, per-class accuracy and confusion matrix of the labelled images (label >= 0)."""
    k = len(class_names)
    labelled = labels >= 0
    out: Dict[str, Any] = {"samples": int(len(labels)), "labelled": int(labelled.sum())}
    if not labelled.any():
        return out
    y, p = labels[labelled], predicted[labelled]
    confusion = np.zeros((k, k), dtype=np.int64)
    np.add.at(confusion, (y, p), 1)
    per_class = {}
    for c in range(k):
        total = int(confusion[c].sum())
        per_class[class_names[c]] = {
            "correct": int(confusion[c, c]),
            "total": total,
            "accuracy": (confusion[c, c] / total) if total else None,
        }
    out.update(
        loss=float(losses[labelled].mean()),
        accuracy=float((y == p).mean()),
        correct=int((y == p).sum()),
        per_class=per_class,
        confusion_matrix={"classes": list(class_names), "rows_are": "true label", "matrix": confusion.tolist()},
    )
    return out


def write_predictions(path: Path, labels, predicted, confidence, class_names, names=None) -> None:
    """predictions.csv: index, (source,) label, predicted class, confidence."""
    buf = io.StringIO()
    w = csv.writer(buf)
    header = (
        ["index"]
        + (["source"] if names is not None else [])
        + ["label", "label_name", "predicted", "predicted_name", "confidence"]
    )
    w.writerow(header)
    for i in range(len(labels)):
        row = [i] + ([names[i]] if names is not None else [])
        label = int(labels[i])
        row += [
            label if label >= 0 else "",
            class_names[label] if label >= 0 else "",
            int(predicted[i]),
            class_names[int(predicted[i])],
            f"{float(confidence[i]):.6f}",
        ]
        w.writerow(row)
    atomic_write_text(path, buf.getvalue())


def plot_confusion(matrix, class_names, path: Path, title: str) -> None:
    m = np.asarray(matrix)
    fig = new_figure(figsize=(7, 6))
    ax = fig.subplots()
    im = ax.imshow(m, cmap="Blues")
    ax.set_xticks(range(len(class_names)), class_names, rotation=45, ha="right")
    ax.set_yticks(range(len(class_names)), class_names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true label")
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            ax.text(
                j,
                i,
                str(m[i, j]),
                ha="center",
                va="center",
                fontsize=7,
                color="white" if m[i, j] > m.max() / 2 else "black",
            )
    fig.colorbar(im, ax=ax)
    ax.set_title(title)
    fig.tight_layout()
    save_figure(fig, path)
