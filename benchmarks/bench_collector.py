"""What Python's garbage collector costs a training process around its framework import and at its exit.

One process stands for a command's rank (``cifar_dist/common/garbage_collector.py``): it imports what
engine=horovod's start imports (TensorFlow, tf-keras, Horovod), makes 200,000 objects that stay alive (a run's),
and exits. Its CPU-seconds (user + system, as its parent counts them) are reported, the median of ``--reps`` runs,
alternating the variants so that a busy machine weighs on each alike:

* ``python``: the collector as Python runs it (the package before 08a0999);
* ``frozen-exit``: 08a0999 to 6f79124: the import with the collector paused, then everything frozen (no
  collection first); everything frozen again at exit, so the shutdown collected nothing, and a file a user's
  code never closed lost its data (issue 47);
* ``now``: the package's ``framework_imports`` (paused, one collection, frozen: in the command's process) and
  ``unfreeze_at_exit`` (the shutdown collects and finalises everything, as for ``python``).

    python -m benchmarks collector --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("python", "frozen-exit", "now")
CHILD = """
import contextlib, gc, json, sys, time
import cifar_dist.common.garbage_collector as collector

collector.is_command_process = lambda: True  # this process stands for the command's

@contextlib.contextmanager
def paused_then_frozen():  # 08a0999's framework_imports
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()

variant = sys.argv[1]
block = {"python": contextlib.nullcontext, "frozen-exit": paused_then_frozen, "now": collector.framework_imports}
at_exit = {"python": lambda: None, "frozen-exit": gc.freeze, "now": collector.unfreeze_at_exit}
started = time.process_time()
with block[variant]():
    import tensorflow, tf_keras, horovod.tensorflow  # what engine=horovod's start imports
imported = time.process_time()
alive = [[i] for i in range(200_000)]  # a run's objects, alive at exit
print(json.dumps({"imports": imported - started, "before_exit": time.process_time()}), flush=True)
at_exit[variant]()
"""


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_process(variant: str) -> dict:
    """CPU-seconds of one process: all of it, its imports, and its exit (after its last line: the shutdown)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
    before = children_cpu_s()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, variant], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    total = children_cpu_s() - before
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"total": total, "imports": said["imports"], "exit": total - said["before_exit"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5, help="processes per variant, alternating (default 5)")
    a = p.parse_args()
    runs = {v: [] for v in VARIANTS}
    for _ in range(a.reps):
        for variant in VARIANTS:
            runs[variant].append(one_process(variant))
    for variant, rs in runs.items():
        medians = {k: statistics.median(r[k] for r in rs) for k in ("total", "imports", "exit")}
        totals = ", ".join(f"{r['total']:.1f}" for r in rs)
        print(
            f"{variant:12s} total {medians['total']:.2f} CPU-s, imports {medians['imports']:.2f}, "
            f"exit {medians['exit']:.2f} ({totals})"
        )


if __name__ == "__main__":
    main()
