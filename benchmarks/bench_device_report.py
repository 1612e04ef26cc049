"""The table of ``benchmarks/bench_device.py``'s results (``docs/benchmarks.md``): one row per run, each against bare
Keras on JAX of the same model and batch.

    python -m benchmarks device-report results/*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _cell(value, digits=0) -> str:
    if value is None:
        return ""
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def rows(results):
    bare = {(r["model"], r["batch_size"]): r["images_per_sec"] for r in results if r["variant"] == "keras"}
    for r in results:
        reference = bare.get((r["model"], r["batch_size"]))
        ratio = r["images_per_sec"] / reference if reference else None
        settings = " ".join(r.get("overrides") or []) + ("" if r.get("augment", True) else " no augmentation")
        yield [
            r["variant"],
            r["model"],
            str(r["batch_size"]),
            settings.strip() or ("augmented" if r["variant"] == "cifar_dist" else ""),
            _cell(r["images_per_sec"]),
            _cell(ratio, 2) + ("x" if ratio else ""),
            _cell(r.get("compile_s"), 1),
            _cell(r["first_epoch_s"], 2),
            _cell(r["later_epoch_s"], 2),
            _cell(r.get("wall_s"), 1),
            _cell(r.get("test_accuracy"), 3),
            _cell(r.get("peak_rss_mb")),
            _cell(r.get("device_peak_mb")),
        ]


def main(paths) -> None:
    results = [json.loads(Path(p).read_text()) for p in paths]
    head = [
        "variant", "model", "batch", "settings", "img/s", "vs bare Keras", "compile s", "first epoch s",
        "later epoch s", "wall s", "test acc", "peak RSS MB", "device peak MB",
    ]  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows(results):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
