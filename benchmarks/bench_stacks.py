"""The two stacks side by side, in one sitting: what a run that names no engine trains at on each.

Each stack is a virtualenv (``make install`` for the horovod stack,
``make install STACK=current`` or ``make test-current`` for the current one);
every variant runs ``python -m cifar_dist`` of that venv on the packaged sample
(the seed CNN, batch 32 per process) in interleaved rounds, and the table gives
each variant's training images/s (the median over the epochs after the first,
whose tracing and warm-up it leaves out; the median over rounds) and its ratio
to the horovod stack's one process:

    python -m benchmarks stacks --stack horovod=.venv/bin/python --stack current=.venv-current/bin/python \\
        --epochs 5 --reps 2

Variants (``--variants``), each run on every stack it applies to:

- ``one``: one process, no engine named (engine=auto: horovod on the horovod stack, tensorflow on the current);
- ``two``: ``launcher=mpirun launcher.np=2``, no engine named (horovod; on the current stack tensorflow, its
  gradients averaged over MPI, since issue 48: jax before);
- ``jax_one``/``jax_two``: ``engine=jax`` on 1 and 2 processes (the JAX engine's own 2 ÷ 1 scaling);
- ``jax_two_unbound``: ``engine=jax`` on 2 processes without core binding (``launcher.bind_to=none``);
- ``jax_two_mpi``: ``engine=jax`` on 2 processes with JAX's MPI collectives instead of Gloo's TCP ones
  (``JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi``), through MPItrampoline: needs ``--mpiwrapper`` = the path of an
  MPIwrapper library built against the system's Open MPI (no package registry ships one).

Extra overrides for every variant: ``--overrides 'trainer.lookahead_decay=0 ...'``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    "one": [],
    "two": ["launcher=mpirun", "launcher.np=2"],
    "jax_one": ["engine=jax"],
    "jax_two": ["engine=jax", "launcher=mpirun", "launcher.np=2"],
    "jax_two_unbound": ["engine=jax", "launcher=mpirun", "launcher.np=2", "launcher.bind_to=none"],
    "jax_two_mpi": [
        "engine=jax",
        "launcher=mpirun",
        "launcher.np=2",
        "+launcher.env.JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi",
    ],
}


def command(python: str, variant: str, epochs: int, run_dir: Path, extra: List[str]) -> List[str]:
    return [
        python,
        "-m",
        "cifar_dist",
        "data=sample",
        f"trainer.epochs={epochs}",
        "trainer.epoch_policy=shard",  # the same epochs on 1 and 2 processes (each process 1/size per epoch)
        "trainer.verbose=0",
        "trainer.plot=false",
        f"hydra.run.dir={run_dir}",
        *VARIANTS[variant],
        *extra,
    ]


def images_per_sec(metrics: dict) -> Optional[float]:
    """The median over the epochs after the first (the first traces and warms up)."""
    rates = [e["images_per_sec"] for e in metrics.get("epochs", [])[1:] if e.get("images_per_sec")]
    return statistics.median(rates) if rates else None


def run_one(python: str, variant: str, epochs: int, run_dir: Path, extra: List[str]) -> dict:
    cmd = command(python, variant, epochs, run_dir, extra)
    started = time.time()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.time() - started
    if proc.returncode != 0:
        return {"ok": False, "wall_s": wall, "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    run = metrics["run"]
    return {
        "ok": True,
        "wall_s": wall,
        "images_per_sec": images_per_sec(metrics),
        "engine": run.get("engine"),
        "processes": metrics.get("ranks"),
        "versions": {k: run.get(k) for k in ("tensorflow", "keras", "horovod", "jax")},
        "peak_rss_mb": max(metrics.get("peak_rss_mb_per_rank") or [0]),
        "test_accuracy": (metrics.get("test") or {}).get("accuracy"),
        "ranks_in_sync": metrics.get("ranks_in_sync"),
    }


def median_of(results: List[dict], key: str) -> Optional[float]:
    values = [r[key] for r in results if r.get("ok") and r.get(key) is not None]
    return statistics.median(values) if values else None


def table(summary: Dict[str, dict]) -> str:
    base = (summary.get("horovod/one") or {}).get("images_per_sec")
    lines = [
        "| stack / variant | engine | processes | images/s | ÷ horovod one | peak RSS MB | test acc | in sync |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for key, row in summary.items():
        rate = row.get("images_per_sec")
        ratio = f"{rate / base:.2f}x" if rate and base else "-"
        lines.append(
            f"| {key} | {row.get('engine', '-')} | {row.get('processes', '-')} | "
            f"{rate:.0f} | {ratio} | {row.get('peak_rss_mb') or 0:.0f} | {row.get('test_accuracy') or 0:.4f} | "
            f"{row.get('ranks_in_sync')} |"
            if rate
            else f"| {key} | failed: {row.get('error', '?')} | | | | | | |"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stack", action="append", required=True, help="NAME=PYTHON, e.g. horovod=.venv/bin/python")
    p.add_argument("--variants", default="one,two,jax_one,jax_two", help=f"comma list of {', '.join(VARIANTS)}")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--reps", type=int, default=2, help="interleaved rounds; medians are over rounds")
    p.add_argument("--overrides", default="", help="extra overrides for every variant (space-separated)")
    p.add_argument("--mpiwrapper", help="libmpiwrapper.so for jax_two_mpi (MPItrampoline's MPITRAMPOLINE_LIB)")
    p.add_argument("--work", default=str(REPO / "outputs" / "bench-stacks"), help="run dirs (git-ignored)")
    p.add_argument("--out", default=str(REPO / "outputs" / "bench-stacks"), help="where stacks.md and stacks.json go")
    args = p.parse_args(argv)
    stacks = dict(s.split("=", 1) for s in args.stack)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}: use {', '.join(VARIANTS)}")
    if "jax_two_mpi" in variants and not args.mpiwrapper:
        p.error("jax_two_mpi needs --mpiwrapper PATH (libmpiwrapper.so)")
    mpi_env = [f"+launcher.env.MPITRAMPOLINE_LIB={args.mpiwrapper}"] if args.mpiwrapper else []
    work = Path(args.work) / time.strftime("%Y%m%d-%H%M%S")
    results: Dict[str, List[dict]] = {}
    for rep in range(args.reps):
        for variant in variants:
            for name, python in stacks.items():
                key = f"{name}/{variant}"
                extra = args.overrides.split() + (mpi_env if variant == "jax_two_mpi" else [])
                r = run_one(python, variant, args.epochs, work / f"{name}-{variant}-{rep}", extra)
                print(f"[{time.strftime('%H:%M:%S')}] {key} rep {rep}: {r.get('images_per_sec') or r}", flush=True)
                results.setdefault(key, []).append(r)
    summary = {}
    for key, rs in results.items():
        ok = [r for r in rs if r.get("ok")]
        row = dict(ok[0]) if ok else dict(rs[0])
        row["images_per_sec"] = median_of(rs, "images_per_sec")
        row["all_images_per_sec"] = [r.get("images_per_sec") for r in rs]
        summary[key] = row
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    flags = Path("/proc/cpuinfo").read_text()
    header = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {cpu} ({os.cpu_count()} cores"
        f"{', avx512_bf16' if 'avx512_bf16' in flags else ''}), {args.epochs} epochs, {args.reps} rounds:\n\n"
        f"    python {' '.join(sys.argv)}\n\n"
    )
    (out / "stacks.md").write_text(header + table(summary) + "\n")
    (out / "stacks.json").write_text(json.dumps({"command": sys.argv, "results": results}, indent=1, default=str))
    print(header + table(summary))
    return 0 if all(r.get("ok") for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
