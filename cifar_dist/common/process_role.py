"""Which role this process plays, told by the environment a launcher sets (the one home of those names) or by
the module the process was started with (the command, or a library call).

Light on purpose (no TensorFlow, no launcher code): the run-dir checks, the
validation, the trainer's stop-signal callback and every launcher read it.
"""

from __future__ import annotations

import os
import sys

# Set in the environment of every process a launcher starts; the app then runs
# the job in-process whatever launcher the config names, so nothing recurses.
RANK_GUARD_ENV = "CIFAR_DIST_CHILD"
# Set by a cluster launcher (Slurm: USR1 before the time limit); read by
# cifar_dist.training.preemption on every rank: stop after the epoch on this signal.
STOP_SIGNAL_ENV = "CIFAR_DIST_STOP_SIGNAL"
COMMAND_MODULE = "cifar_dist.__main__"  # ``python -m cifar_dist`` and the ``cifar-dist`` script run its ``main``


def in_child_process() -> bool:
    """True inside a process a launcher started (an mpirun rank, a Slurm task, a Batch AI node)."""
    return os.environ.get(RANK_GUARD_ENV) == "1"


def is_command_process() -> bool:
    """True in a process started as cifar_dist's command: ``python -m cifar_dist`` (its ``__main__`` is the
    command's module), the ``cifar-dist`` script (its ``__main__`` calls the command's ``main``), a rank (one of
    those). False in a library call: a user's script, a notebook or pytest whose ``__main__`` is its own."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return spec.name == COMMAND_MODULE
    return getattr(getattr(main, "main", None), "__module__", None) == COMMAND_MODULE
