"""Which role this process plays, told by the environment a launcher sets: the one home of those names.

Light on purpose (no TensorFlow, no launcher code): the run-dir checks, the
validation, the trainer's stop-signal callback and every launcher read it.
"""

from __future__ import annotations

import os

# Set in the environment of every process a launcher starts; the app then runs
# the job in-process whatever launcher the config names, so nothing recurses.
RANK_GUARD_ENV = "CIFAR_DIST_CHILD"
# Set by a cluster launcher (Slurm: USR1 before the time limit); read by
# cifar_dist.training.preemption on every rank: stop after the epoch on this signal.
STOP_SIGNAL_ENV = "CIFAR_DIST_STOP_SIGNAL"


def in_child_process() -> bool:
    """True inside a process a launcher started (an mpirun rank, a Slurm task, a Batch AI node)."""
    return os.environ.get(RANK_GUARD_ENV) == "1"
