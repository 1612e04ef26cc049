"""Markdown tables from benchmarks/bench_breakdown.py's JSON (``python -m benchmarks breakdown-report FILE.json``)."""

from __future__ import annotations

import json
import sys
from typing import Dict, List, Optional

from bench_phases import CATEGORIES


def seconds(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:.1f} s"


def breakdown_runs(result: dict) -> List[dict]:
    """The first successful run of each config (the N-epoch one), in the order seed 1, seed 2, speedrun 1 and 2."""
    seen: Dict[str, dict] = {}
    for r in result["runs"]:
        if r.get("breakdown") and r["config"] not in seen:
            seen[r["config"]] = r
    return [seen[c] for c in ("seed_1", "seed_2", "speedrun_1", "speedrun_2") if c in seen]


LABELS = {
    "seed_1": "seed CNN, 1 rank",
    "seed_2": "seed CNN, 2 ranks",
    "speedrun_1": "speedrun, 1 rank",
    "speedrun_2": "speedrun, 2 ranks",
}


def header(r: dict) -> str:
    return f"{LABELS[r['config']]}, {r['epochs_run']} ep"


def category_table(runs: List[dict]) -> List[str]:
    lines = [
        "| part of the whole command | " + " | ".join(header(r) for r in runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    for cat in CATEGORIES:
        cells = []
        for r in runs:
            s, whole = r["breakdown"]["categories"].get(cat, 0.0), r["breakdown"]["whole_s"]
            cells.append(f"{s:.1f} s ({100 * s / whole:.0f} %)")
        lines.append(f"| {cat} | " + " | ".join(cells) + " |")
    lines.append("| **whole command** | " + " | ".join(f"**{r['breakdown']['whole_s']:.1f} s**" for r in runs) + " |")
    return lines


def phase_table(runs: List[dict]) -> List[str]:
    """Every phase of every run (a phase a run does not have is blank)."""
    order: List[str] = []
    values: Dict[str, Dict[int, float]] = {}
    for i, r in enumerate(runs):
        for p in r["breakdown"]["phases"]:
            if p["phase"] not in values:
                order.append(p["phase"])
                values[p["phase"]] = {}
            values[p["phase"]][i] = values[p["phase"]].get(i, 0.0) + p["seconds"]
    lines = ["| phase | " + " | ".join(header(r) for r in runs) + " |", "|---|" + "---:|" * len(runs)]
    for name in order:
        cells = [f"{values[name][i]:.2f}" if i in values[name] else "" for i in range(len(runs))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def fixed_table(ratios: dict) -> List[str]:
    lines = [
        "| run | T(N) | T(2N) | fixed = 2 T(N) − T(2N) | epoch cost | whole / N epochs' cost | goal |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in (("seed_1_fixed", "seed CNN, 1 rank"), ("speedrun_2_fixed", "speedrun, 2 ranks")):
        both = ratios.get(key) or {}
        for kind, note in (("measured", ""), ("without_fit_return_wait", ", without the wait as fit returns")):
            f = both.get(kind)
            if f:
                lines.append(
                    f"| {label}, N = {f['epochs']}{note} | {seconds(f['t_n_s'])} | {seconds(f['t_2n_s'])} | "
                    f"{seconds(f['fixed_s'])} | {f['epoch_cost_s']:.2f} s | "
                    f"**{f['whole_vs_epochs_cost']:.2f}×** | ≤ 1.3× |"
                )
            elif kind == "measured":
                lines.append(f"| {label} | | | | | not measurable (a run failed or T(2N) ≤ T(N)) | |")
        if both.get("fit_return_wait_s"):
            lines.append(
                "| ↳ waits as model.fit returned (N, 2N runs) | "
                + " | ".join(seconds(w) for w in both["fit_return_wait_s"])
                + " | | | | |"
            )
    return lines


def budget_lines(ratios: dict) -> List[str]:
    v = ratios.get("speedrun_2_vs_seed_port")
    if not v:
        return []
    acc = lambda x: "—" if x is None else f"{x:.4f}"  # noqa: E731
    return [
        (
            "| speedrun, 2 ranks, as configured ({n} epochs) | seed port, {e} epochs | ratio (goal ≤ 0.5×) "
            "| speedrun test acc (TTA / plain) | seed port test acc |"
        ).format(e=v["seed_port_epochs"], n=v.get("speedrun_epochs", "?")),
        "|---:|---:|---:|---:|---:|",
        f"| {seconds(v['speedrun_2_s'])} | {seconds(v['seed_port_s'])} | **{v['ratio']:.2f}×** | "
        f"{acc(v['speedrun_test_accuracy'])} / {acc(v['speedrun_test_plain_accuracy'])} | "
        f"{acc(v['seed_port_test_accuracy'])} |",
    ]


def runs_table(result: dict) -> List[str]:
    lines = [
        "| run | epochs | whole command | of which waiting as model.fit returned | test acc "
        "| load 1 min before → after |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in result["runs"]:
        acc = r.get("test_accuracy")
        state = "" if r.get("ok") else " (FAILED: " + str(r.get("error", ""))[:80] + ")"
        load = r.get("load_avg_1min") or [0, 0]
        wait = (r.get("breakdown") or {}).get("fit_return_wait_s")
        lines.append(
            f"| {r['variant']}{state} | {r.get('epochs_run') or r['epochs_asked']} | "
            f"{seconds(r.get('process_wall_s'))} | "
            f"{seconds(wait)} | "
            f"{'—' if acc is None else f'{acc:.4f}'} | {load[0]:.1f} → {load[1]:.1f} |"
        )
    return lines


def markdown(result: dict) -> str:
    info, runs = result["info"], breakdown_runs(result)
    m = info["machine"]
    out = [
        f"Sitting of {info['date']}, {m['cpu']} ({m['cores']} cores, avx512_bf16: {m['avx512_bf16']}), "
        f"TensorFlow {m['tensorflow']}; data: {info['data']}; {info.get('sitting_s', 0) / 60:.0f} min.",
        "",
        "```bash",
        info["command"],
        "```",
        "",
    ]
    if runs:
        out += category_table(runs) + [""]
    out += fixed_table(result["ratios"]) + [""] + budget_lines(result["ratios"]) + [""] + runs_table(result) + [""]
    if runs:
        out += ["Every phase (seconds):", ""] + phase_table(runs) + [""]
    imports = result.get("imports") or {}
    if imports.get("cumulative_us"):
        found = ", ".join(
            f"{k} {v / 1e6:.2f} s" for k, v in sorted(imports["cumulative_us"].items(), key=lambda kv: -kv[1])
        )
        missing = [
            k for k in ("mlflow", "azure", "matplotlib", "optuna", "tensorflow") if k not in imports["cumulative_us"]
        ]
        out += [
            f"`{imports['command']}` ({imports['wall_s']:.1f} s): {found}; "
            f"not imported: {', '.join(missing) or 'none'}.",
            "",
        ]
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(json.loads(open(sys.argv[1]).read())))
