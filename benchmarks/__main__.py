"""``python -m benchmarks``: the list of benchmarks; ``python -m benchmarks NAME [ARGS...]``: run one (catalog.py)."""

from __future__ import annotations

import runpy
import subprocess
import sys
from typing import List

from benchmarks.catalog import BENCHMARKS, HERE, by_name, listing


def main(argv: List[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    name, args = argv[0], argv[1:]
    benchmark = by_name(name)
    if benchmark is None:
        from cifar_dist.common.errors import did_you_mean  # lazy: only to name the nearest benchmark

        hint = did_you_mean(name, [b.name for b in BENCHMARKS])
        print(f"benchmarks: error: no benchmark {name!r} (python -m benchmarks lists them){hint}", file=sys.stderr)
        return 2
    if benchmark.script.endswith(".sh"):
        return subprocess.call(["bash", str(benchmark.path), *args])
    sys.path.insert(0, str(HERE))  # as `python benchmarks/<script>` has it: the scripts import each other by name
    sys.argv = [str(benchmark.path), *args]
    runpy.run_path(str(benchmark.path), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
