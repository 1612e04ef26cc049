"""Turns bench_training.py's raw results into ratios, a markdown table, JSON and two plots.

Kept apart from the runner so the reading of the numbers (which epochs count,
what "time to accuracy" means) is in one small place and can be re-run on a
saved ``benchmark_results.json`` without training again:

    python -m benchmarks training-report benchmarks/results/benchmark_results.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional

REFERENCE = "seed"


def steady_images_per_sec(result: dict) -> Optional[float]:
    """Median training images/s over the epochs after the first (tracing, warm-up)."""
    rates = [e["images_per_sec"] for e in result.get("epochs") or [] if e.get("images_per_sec")]
    steady = rates[1:] or rates
    return statistics.median(steady) if steady else None


def accuracy_timeline(result: dict) -> List[tuple]:
    """[(cumulative epoch seconds, test-set accuracy after that epoch)] of one run."""
    out, elapsed = [], 0.0
    for e in result.get("epochs") or []:
        elapsed += e.get("epoch_seconds") or 0.0
        if e.get("val_accuracy") is not None:
            out.append((elapsed, e["val_accuracy"]))
    return out


def time_to(result: dict, target: float) -> Optional[float]:
    for elapsed, acc in accuracy_timeline(result):
        if acc >= target - 1e-9:
            return elapsed
    return None


def _ratio(a, b):
    return a / b if a is not None and b else None


def summarise(results: List[dict], pipelines: List[dict], info: dict) -> dict:
    """Per-variant medians over rounds, ratios to the seed reference, targets."""
    by_variant: Dict[str, List[dict]] = {}
    for r in results:
        by_variant.setdefault(r["variant"], []).append(r)
    first = {name: runs[0] for name, runs in by_variant.items()}
    seed = first.get(REFERENCE) or {}
    target = seed.get("test_accuracy")
    seed_time = sum(e.get("epoch_seconds") or 0.0 for e in seed.get("epochs") or []) or None

    rows = []
    for name, runs in by_variant.items():
        ok = [r for r in runs if r.get("ok")]
        rates = [x for x in (steady_images_per_sec(r) for r in ok) if x]
        rss = [max(r["peak_rss_mb_per_rank"]) for r in ok if r.get("peak_rss_mb_per_rank")]
        head = first[name]
        rows.append(
            {
                "variant": name,
                "label": head["label"],
                "ranks": head["ranks"],
                "ok": bool(ok),
                "error": None if ok else runs[0].get("error"),
                "precision": head.get("precision"),
                "global_batch": head.get("global_batch"),
                "epochs": len(head.get("epochs") or []),
                "images_per_sec": statistics.median(rates) if rates else None,
                "images_per_sec_runs": rates,
                "peak_rss_mb": max(rss) if rss else None,
                "test_accuracy": head.get("test_accuracy"),
                "time_to_target_s": time_to(head, target) if target is not None and head.get("ok") else None,
                "train_time_s": sum(e.get("epoch_seconds") or 0.0 for e in head.get("epochs") or []) or None,
                "process_wall_s": head.get("process_wall_s"),
                "timeline": accuracy_timeline(head) if head.get("ok") else [],
                "command": head.get("command"),
                "load_avg_1min": head.get("load_avg_1min"),
            }
        )
    ref = next((r for r in rows if r["variant"] == REFERENCE), {})
    for row in rows:
        row["images_per_sec_vs_seed"] = _ratio(row["images_per_sec"], ref.get("images_per_sec"))
        row["peak_rss_vs_seed"] = _ratio(row["peak_rss_mb"], ref.get("peak_rss_mb"))
        row["time_to_target_vs_seed_total"] = _ratio(row["time_to_target_s"], seed_time)

    pipeline = {}
    good = [p for p in pipelines if p.get("ok")]
    if good:
        for key in good[0]["images_per_sec"]:
            pipeline[key] = statistics.median(p["images_per_sec"][key] for p in good)
    one = next((r for r in rows if r["variant"] == "cifar_dist_1"), {})
    many = next((r for r in rows if r["variant"] == "cifar_dist_N"), {})
    fast = next((r for r in rows if r["variant"] == "fast"), {})
    speedrun = next((r for r in rows if r["variant"] == "speedrun_N"), {})
    targets = {
        "cifar_dist_1_vs_seed_images_per_sec": {"value": one.get("images_per_sec_vs_seed"), "goal": 1.5},
        "cifar_dist_N_vs_1_images_per_sec": {
            "value": _ratio(many.get("images_per_sec"), one.get("images_per_sec")),
            "goal": 0.9,
        },
        "pipeline_vs_training_consumption": {
            "value": _ratio(pipeline.get("cifar_dist"), one.get("images_per_sec")),
            "goal": 10.0,
        },
        "fast_time_to_seed_accuracy_vs_seed_time": {
            "value": fast.get("time_to_target_vs_seed_total"),
            "goal": 0.25,
            "lower_is_better": True,
        },
        # Issue 15: experiment=speedrun on N ranks, whole command (start-up included) vs the seed's whole command.
        "speedrun_N_test_accuracy": {"value": speedrun.get("test_accuracy"), "goal": 0.80},
        "speedrun_N_command_wall_vs_seed_command_wall": {
            "value": _ratio(speedrun.get("process_wall_s"), ref.get("process_wall_s")),
            "goal": 0.5,
            "lower_is_better": True,
        },
    }
    for t in targets.values():
        v = t["value"]
        t["met"] = None if v is None else (v <= t["goal"] if t.get("lower_is_better") else v >= t["goal"])
    summary = {
        "info": info,
        "target_accuracy": target,
        "seed_train_time_s": seed_time,
        "rows": rows,
        "pipeline_images_per_sec": pipeline,
        "targets": targets,
    }
    summary["markdown"] = markdown(summary)
    return summary


def _fmt(v, spec=".0f", suffix=""):
    return "—" if v is None else f"{v:{spec}}{suffix}"


def markdown(s: dict) -> str:
    info = s["info"]
    lines = [
        f"Benchmark of {info.get('date', '?')} on {info['machine']['cpu']} ({info['machine']['cores']} cores), "
        f"TensorFlow {info['machine']['tensorflow']}; data: {info['data']}; seed epochs {info['seed_epochs']}, "
        f"other variants {info['epochs']} epochs, {info['reps']} round(s).",
        "",
        f"Accuracy target = the seed reference's final test accuracy: {_fmt(s['target_accuracy'], '.4f')} "
        f"(seed training time {_fmt(s['seed_train_time_s'], '.0f', ' s')}).",
        "",
        "| variant | ranks | global batch | train images/s | × seed | peak RSS/rank MB | × seed | final test acc "
        "| time to target | × seed time | whole command | load avg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in s["rows"]:
        if not r["ok"]:
            lines.append(f"| {r['label']} | {r['ranks']} | | failed: {r['error']} | | | | | | | | |")
            continue
        lines.append(
            f"| {r['label']} | {r['ranks']} | {_fmt(r['global_batch'], 'd') if r['global_batch'] else '—'} "
            f"| {_fmt(r['images_per_sec'])} | {_fmt(r['images_per_sec_vs_seed'], '.2f', '×')} "
            f"| {_fmt(r['peak_rss_mb'])} | {_fmt(r['peak_rss_vs_seed'], '.2f', '×')} "
            f"| {_fmt(r['test_accuracy'], '.4f')} ({r['epochs']} ep) | {_fmt(r['time_to_target_s'], '.0f', ' s')} "
            f"| {_fmt(r['time_to_target_vs_seed_total'], '.2f', '×')} | {_fmt(r.get('process_wall_s'), '.0f', ' s')} "
            f"| {'→'.join(f'{x:.1f}' for x in r.get('load_avg_1min') or []) or '—'} |"
        )
    p = s["pipeline_images_per_sec"]
    if p:
        base = p.get("seed_flow")
        lines += [
            "",
            "Input pipeline alone (no model), images/s:",
            "",
            "| pipeline | images/s | × seed flow |",
            "|---|---:|---:|",
        ]
        for k, v in p.items():
            lines.append(f"| {k} | {v:.0f} | {_fmt(_ratio(v, base), '.1f', '×')} |")
    lines += [
        "",
        "Targets of issues 5 and 15 (ratios measured in this run):",
        "",
        "| target | value | goal | met |",
        "|---|---:|---:|---|",
    ]
    for k, t in s["targets"].items():
        goal = ("≤ " if t.get("lower_is_better") else "≥ ") + f"{t['goal']}"
        met = {True: "yes", False: "no", None: "—"}[t["met"]]
        lines.append(f"| {k} | {_fmt(t['value'], '.2f')} | {goal} | {met} |")
    return "\n".join(lines) + "\n"


def plot(s: dict, out: Path) -> List[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {r["variant"]: r for r in s["rows"] if r["ok"]}
    paths = []

    fig, ax = plt.subplots(figsize=(6, 4))
    series = [
        ("cifar_dist", ["cifar_dist_1", "cifar_dist_N"]),
        ("cifar_dist precision=mixed", ["mixed_1", "mixed_N"]),
        ("cifar_dist compression=fp16", ["fp16_N"]),
    ]
    for label, names in series:
        pts = sorted(
            (rows[n]["ranks"], rows[n]["images_per_sec"]) for n in names if n in rows and rows[n]["images_per_sec"]
        )
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=label)
    if "cifar_dist_1" in rows and rows["cifar_dist_1"]["images_per_sec"]:
        top = max([r["ranks"] for r in rows.values()] + [2])
        base = rows["cifar_dist_1"]["images_per_sec"]
        ax.plot([1, top], [base, base * top], ":", color="grey", label="linear scaling of 1 rank")
    for name, style in (("seed", "--"), ("bare", "-.")):
        if name in rows and rows[name]["images_per_sec"]:
            ax.axhline(
                rows[name]["images_per_sec"],
                linestyle=style,
                color="black" if name == "seed" else "tab:brown",
                label=rows[name]["label"].split(" (")[0] + " (1 process)",
            )
    ax.set_xlabel("ranks (processes on this machine)")
    ax.set_ylabel("training images/s (whole job)")
    ax.set_title("Throughput vs ranks")
    ax.set_xticks(sorted({r["ranks"] for r in rows.values()}))
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "benchmark_throughput.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in ("seed", "bare", "cifar_dist_1", "cifar_dist_N", "fast_1", "fast", "speedrun_1", "speedrun_N"):
        if name in rows and rows[name]["timeline"]:
            t = rows[name]["timeline"]
            (line,) = ax.plot([x for x, _ in t], [y for _, y in t], "-", marker=".", label=rows[name]["label"])
            if name.startswith("speedrun") and rows[name]["test_accuracy"] is not None:
                # The final test uses test-time augmentation; the per-epoch points do not.
                ax.plot([t[-1][0]], [rows[name]["test_accuracy"]], "*", markersize=10, color=line.get_color())
    if s["target_accuracy"] is not None:
        ax.axhline(s["target_accuracy"], color="black", linestyle="--", linewidth=0.8, label="seed's final accuracy")
    if s["seed_train_time_s"]:
        ax.axvline(
            s["seed_train_time_s"] / 4, color="grey", linestyle=":", linewidth=0.8, label="1/4 of the seed's time"
        )
        ax.axvline(
            s["seed_train_time_s"] / 2, color="grey", linestyle="-.", linewidth=0.8, label="1/2 of the seed's time"
        )
    ax.set_xlabel("training + validation time (s, start-up excluded); ★ final test with TTA")
    ax.set_ylabel("test-set accuracy after each epoch")
    ax.set_title("Test accuracy vs wall time")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "benchmark_accuracy.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def write_outputs(summary: dict, out: Path) -> List[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "benchmark_results.json", out / "benchmark_results.md"]
    paths[0].write_text(json.dumps(summary, indent=1) + "\n")
    paths[1].write_text("# Benchmark results (generated by benchmarks/bench_training.py)\n\n" + summary["markdown"])
    return paths + plot(summary, out)


if __name__ == "__main__":
    saved = json.loads(Path(sys.argv[1]).read_text())
    saved["markdown"] = markdown(saved)
    for p in write_outputs(saved, Path(sys.argv[1]).parent):
        print(p)
