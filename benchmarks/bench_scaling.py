#!/usr/bin/env python
"""Measure multi-rank scaling on this machine: N ranks (one core share each)
versus 1 rank using every core, same per-rank batch.

    python -m benchmarks scaling                       # 2 ranks vs 1, 3 rounds
    python -m benchmarks scaling --rounds 5 --epochs 4 --variant bound --variant naive

Each configuration is a real ``python -m cifar_dist`` run on the packaged
sample (data=sample); the number compared is ``images_per_sec`` from the
run's metrics.json (whole-job training images per second, median over the
epochs after the first, validation excluded). Rounds alternate the
configurations so that load from other processes on a shared machine hits
them alike; the ratio reported is the median of the per-round ratios.

Variants of the N-rank run:
  bound  launcher=mpirun as shipped: --map-by slot:PE=cores/N --bind-to core,
         TensorFlow threads sized automatically from the binding, MPI yields
         the core while waiting, Horovod cycle 5 ms
  busy   the same binding and threads, but OpenMPI busy-polls and Horovod
         cycles every 1 ms (its defaults; the 0.78x case of issue 3)
  naive  mpirun without binding, every rank with TensorFlow's thread pools
         sized for the whole machine (the 0.43x case of issue 3)
  --try NAME="overrides ..."  any other variant, e.g.
         --try yield="launcher.extra_args=[--mca,mpi_yield_when_idle,1]"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

COMMON = [
    "data=sample",
    "trainer.tensorboard=false",
    "trainer.plot=false",
    "trainer.save_model=false",
    "trainer.verbose=0",
    "trainer.keep_checkpoints=1",
]

VARIANTS = {
    "bound": [],
    "busy": ["launcher.yield_when_idle=false", "launcher.cycle_time_ms=0"],
    "naive": [
        "launcher.bind_to=none",
        "launcher.yield_when_idle=false",
        "launcher.cycle_time_ms=0",
        "trainer.intra_op_threads={cores}",
        "trainer.inter_op_threads={cores}",
    ],
}


def run(overrides, run_dir: Path, env) -> dict:
    cmd = [sys.executable, "-m", "cifar_dist", *overrides, f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        sys.exit(f"run failed ({' '.join(cmd)}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    from cifar_dist.common.results import read_metrics

    metrics = read_metrics(run_dir)
    if metrics is None:
        sys.exit(f"run left no readable metrics in {run_dir} ({' '.join(cmd)})")
    rates = [round(e["images_per_sec"], 1) for e in metrics["epochs"]]
    return {
        "images_per_sec": metrics["images_per_sec"],
        "epoch_rates": rates,
        "threads": [metrics["run"]["threads_intra_op"], metrics["run"]["threads_inter_op"]],
        "command": "python -m cifar_dist " + " ".join(overrides),
    }


def main() -> None:
    sys.path.insert(0, str(REPO))  # cifar_dist.common.results, run from a checkout
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3, help="epochs each rank trains (first one is warm-up)")
    parser.add_argument("--batch", type=int, default=32, help="per-rank batch (the seed's 32)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="default: bound")
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="NAME=OVERRIDES",
        help="an extra N-rank variant: a name, '=', then space-separated overrides",
    )
    parser.add_argument("--json", type=Path, help="write every measurement here")
    args = parser.parse_args()
    variants = args.variant or ([] if args.tries else ["bound"])
    for spec in args.tries:
        name, _, overrides = spec.partition("=")
        VARIANTS[name] = overrides.split()
        variants.append(name)
    cores = len(os.sched_getaffinity(0))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("CIFAR_DIST_CHILD", None)

    # epoch_policy=divide (the seed's): every rank walks the whole sample each
    # epoch and the epoch count is divided by the ranks, so N ranks get
    # epochs * N to train `epochs` epochs each, on the same per-rank batch.
    single = [*COMMON, "launcher=local", f"trainer.epochs={args.epochs}", f"trainer.batch_size={args.batch}"]
    multi = {
        v: [
            *COMMON,
            "launcher=mpirun",
            f"launcher.np={args.ranks}",
            f"trainer.epochs={args.epochs * args.ranks}",
            f"trainer.batch_size={args.batch}",
            *[o.format(cores=cores) for o in VARIANTS[v]],
        ]
        for v in variants
    }
    results = {"cores": cores, "ranks": args.ranks, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        for r in range(args.rounds):
            entry = {"load_before": os.getloadavg()[0]}
            entry["1 rank"] = run(single, Path(tmp) / f"r{r}_single", env)
            for v, overrides in multi.items():
                entry[v] = run(overrides, Path(tmp) / f"r{r}_{v}", env)
                entry[f"{v} ratio"] = entry[v]["images_per_sec"] / entry["1 rank"]["images_per_sec"]
            entry["load_after"] = os.getloadavg()[0]
            results["rounds"].append(entry)
            print(
                f"round {r + 1}: 1 rank {entry['1 rank']['images_per_sec']:.1f} img/s; "
                + "; ".join(f"{v} {entry[v]['images_per_sec']:.1f} img/s = {entry[f'{v} ratio']:.3f}x" for v in multi)
                + f" (load {entry['load_before']:.2f} -> {entry['load_after']:.2f})",
                flush=True,
            )
    for v in multi:
        ratios = [e[f"{v} ratio"] for e in results["rounds"]]
        results[f"{v} median ratio"] = statistics.median(ratios)
        print(
            f"{v}: {args.ranks} ranks / 1 rank = {statistics.median(ratios):.3f}x "
            f"(median of {ratios and len(ratios)} rounds: " + ", ".join(f"{x:.3f}" for x in ratios) + ")"
        )
    print(
        "commands:\n  "
        + "\n  ".join([results["rounds"][0]["1 rank"]["command"]] + [results["rounds"][0][v]["command"] for v in multi])
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
