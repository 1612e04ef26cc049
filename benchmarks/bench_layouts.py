"""engine=jax's layouts of ranks on one machine: P processes of M devices each (a rank is a device).

Each layout trains the same model on the packaged sample, one process per layout at a time, and reports the
images/s of its steady epochs (after the first) and its wall time; on a CPU the devices are the ones
``XLA_FLAGS=--xla_force_host_platform_device_count=M`` makes, and they share the machine's cores (XLA's
thread pool), so this measures what splitting a CPU into devices costs, and which layout a CPU host should
take. Layouts are ``PxM`` (``1x1``, ``1x2``, ``2x1``...): ``P`` > 1 runs under ``launcher=mpirun``.
The global batch is ``trainer.batch_size`` x ranks, so ``1x1`` at batch 64 and ``1x2`` at 32 train the same
global batch; ``--same-global-batch`` sets each layout's per-rank batch so (default: the batch is per rank, as
the config says it).

    python -m benchmarks layouts --layouts 1x1 1x2 2x1 --epochs 3 --batch-size 32 --out layouts.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def command(layout: str, args, run_dir: Path) -> tuple:
    processes, devices = (int(n) for n in layout.split("x"))
    ranks = processes * devices
    batch = args.batch_size // ranks if args.same_global_batch else args.batch_size
    overrides = [
        "engine=jax",
        "data=sample",
        f"model={args.model}",
        f"trainer.epochs={args.epochs * ranks}",
        f"trainer.batch_size={batch}",
        "trainer.verbose=0",
        "trainer.plot=false",
        "trainer.save_model=false",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip  (divide: epochs / ranks = --epochs each)
    if processes > 1:
        overrides += ["launcher=mpirun", f"launcher.np={processes}"]
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    return [sys.executable, "-m", "cifar_dist", *overrides], env


def one_layout(layout: str, args, scratch: Path) -> dict:
    run_dir = scratch / f"{layout}-{time.monotonic_ns()}"
    argv, env = command(layout, args, run_dir)
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"bench_layouts: {layout} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    m = json.loads((run_dir / "metrics.json").read_text())
    rates = [e["images_per_sec"] for e in m["epochs"]]
    return {
        "layout": m["run"]["layout"],
        "global_batch_size": m["run"]["global_batch_size"],
        "images_per_sec": statistics.median(rates[1:] or rates),
        "wall_s": wall,
        "test_accuracy": m["test"]["accuracy"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layouts", nargs="+", default=["1x1", "1x2", "2x1"])
    parser.add_argument("--model", default="seed_cnn")
    parser.add_argument("--epochs", type=int, default=3, help="epochs each layout trains (after the division)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--same-global-batch", action="store_true")
    parser.add_argument("--reps", type=int, default=1, help="rounds of all layouts, alternated")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    results = {layout: [] for layout in args.layouts}
    with tempfile.TemporaryDirectory(prefix="layouts-") as scratch:
        for _ in range(args.reps):
            for layout in args.layouts:
                results[layout].append(one_layout(layout, args, Path(scratch)))
                print(layout, results[layout][-1], flush=True)
    summary = {
        layout: {**runs[-1], "images_per_sec": statistics.median(r["images_per_sec"] for r in runs),
                 "wall_s": statistics.median(r["wall_s"] for r in runs), "runs": runs}
        for layout, runs in results.items()
    }  # fmt: skip
    Path(args.out).write_text(json.dumps({"machine_cores": os.cpu_count(), "layouts": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
