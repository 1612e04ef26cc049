"""The fixed cost of a short engine=jax run: its wall time outside its epochs, with a warm compilation cache.

What every short run and sweep point pays (issue 55): a 2-epoch ``experiment=speedrun data=sample engine=jax``,
one process, run ``--reps`` times per variant after one warm-up run that fills JAX's persistent compilation
cache (a folder of its own, so that every measured run loads its programs). Each run's command wall time, the
sum of its epochs' seconds as ``metrics.json`` records them (``epoch_seconds``: training and validation), and the
difference, the time outside the epochs: start-up (imports, Keras, JAX, the config's checks, the model's build),
the final test, the writes and the exit. Variants are interpreters (``--variant NAME=PYTHON``, e.g. two
checkouts' venvs, before and after a change), run alternately so that a machine's drift falls on both alike.
Every process gets the same environment; ``--overrides`` changes the command.

    python -m benchmarks fixed-cost --variant before=/work/base/.venv-jax/bin/python \\
        --variant after=.venv-jax/bin/python --reps 5 --out fixed_cost.json
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

COMMAND = ("engine=jax", "experiment=speedrun", "data=sample", "trainer.epochs=2")


def one_run(python: str, overrides: list, cache: Path, cwd: Path) -> dict:
    """One command to its end: its wall time, its epochs' seconds (metrics.json) and the rest."""
    run_dir = cwd / f"run-{time.monotonic_ns()}"
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    proc = subprocess.run(
        [python, "-m", "cifar_dist", *overrides, f"hydra.run.dir={run_dir}"],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"bench_fixed_cost: {python} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    epochs = sum(e["epoch_seconds"] for e in metrics["epochs"])
    return {"wall_s": wall, "epochs_s": epochs, "outside_s": wall - epochs, "test": metrics["test"]["accuracy"]}


def medians(runs: list) -> dict:
    return {key: statistics.median(r[key] for r in runs) for key in ("wall_s", "epochs_s", "outside_s")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", action="append", required=True, help="NAME=PYTHON (repeatable)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--overrides", nargs="*", default=list(COMMAND), help=f"the command (default {COMMAND})")
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    variants = dict(v.split("=", 1) for v in args.variant)
    runs = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="fixed-cost-") as scratch:
        root = Path(scratch)
        caches = {name: root / f"cache-{name}" for name in variants}
        for name, python in variants.items():  # the warm-up: fills each variant's compilation cache
            one_run(python, args.overrides, caches[name], root)
        for rep in range(args.reps):
            for name, python in variants.items():
                runs[name].append(one_run(python, args.overrides, caches[name], root))
                print(f"{name} rep {rep + 1}: {runs[name][-1]}", flush=True)
    result = {
        "command": ["python", "-m", "cifar_dist", *args.overrides],
        "variants": {name: {"python": python, "median": medians(runs[name]), "runs": runs[name]}
                     for name, python in variants.items()},
    }  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=2))
    for name in variants:
        print(name, {k: round(v, 2) for k, v in result["variants"][name]["median"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
