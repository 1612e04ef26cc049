"""Loaded by Python at start-up when this folder is on PYTHONPATH (benchmarks/bench_breakdown.py puts it there).

Does nothing unless CIFAR_DIST_PHASE_LOG names a file: then every process of
the run (the launching one and each rank) appends timestamped phase events to
it (phase_probe.py). Nothing of cifar_dist is imported here.
"""

import os

if os.environ.get("CIFAR_DIST_PHASE_LOG"):
    import phase_probe

    phase_probe.install(os.environ["CIFAR_DIST_PHASE_LOG"])
