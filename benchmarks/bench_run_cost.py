"""The whole cost of a short run: CPU-seconds and wall time of one command, every process it starts included.

What a run costs before and after its epochs (imports, tracing, saving, exit) is most of a short run's cost,
and of every end-to-end test's. This runs one short command, the same ``--reps`` times, and reports the median
CPU-seconds (user + system of the command and every process it waited for: launcher, mpirun, ranks) and wall
time, per variant:

* ``one``: ``python -m cifar_dist`` on the first ``--train-images``/``--test-images`` of the packaged sample,
  ``--epochs`` epochs, one process;
* ``two``: the same with ``launcher=mpirun launcher.np=2``.

Each process is given one TensorFlow thread (as each run of make test's parallel pass is: tests/helpers/cli.py),
so that CPU-seconds measure work, not threads spinning. To compare two versions of the package, run it at
each commit in one sitting, and alternate (``--label`` names the JSON's line):

    python -m benchmarks run-cost --reps 6 --label before --out /tmp/cost_before.json
    python -m benchmarks run-cost --reps 6 --label after --out /tmp/cost_after.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import data_overrides, prepare_data  # noqa: E402 (a script beside this one)

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {"one": (), "two": ("launcher=mpirun", "launcher.np=2")}
QUIET = ("trainer.verbose=0", "trainer.plot=false", "trainer.tensorboard=false")
ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(overrides: list, run_dir: Path) -> dict:
    """One command to its end: its wall time and the CPU-seconds of every process it waited for."""
    cpu, wall = children_cpu_s(), time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cifar_dist", *overrides, f"hydra.run.dir={run_dir}"],
        cwd=REPO,
        env={**os.environ, **ONE_THREAD},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"bench_run_cost: the run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"cpu_s": children_cpu_s() - cpu, "wall_s": time.monotonic() - wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default="one,two", help=f"comma list of {', '.join(VARIANTS)} (default both)")
    p.add_argument("--reps", type=int, default=6, help="runs of each variant, alternating (default 6)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-images", type=int, default=256)
    p.add_argument("--test-images", type=int, default=64)
    p.add_argument("--label", default="", help="names this sitting's line in the JSON (e.g. the commit)")
    p.add_argument("--out", help="write the results as JSON to OUT")
    a = p.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"bench_run_cost: unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    with tempfile.TemporaryDirectory(prefix="bench_run_cost_") as tmp:
        work = Path(tmp)
        data = prepare_data(a.train_images, a.test_images, work)
        common = [*data_overrides(data), f"trainer.epochs={a.epochs}", *QUIET]
        runs = {v: [] for v in variants}
        for rep in range(a.reps):
            for v in variants:
                runs[v].append(one_run([*common, *VARIANTS[v]], work / f"{v}-{rep}"))
    result = {"label": a.label, "reps": a.reps, "epochs": a.epochs, "images": [a.train_images, a.test_images]}
    for v, rs in runs.items():
        cpu, wall = [r["cpu_s"] for r in rs], [r["wall_s"] for r in rs]
        result[v] = {"cpu_s_median": statistics.median(cpu), "wall_s_median": statistics.median(wall), "runs": rs}
        print(
            f"{a.label or 'this'} {v}: median {statistics.median(cpu):.2f} CPU-s, {statistics.median(wall):.2f} s wall"
            f" ({', '.join(f'{c:.1f}' for c in cpu)} CPU-s)"
        )
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
