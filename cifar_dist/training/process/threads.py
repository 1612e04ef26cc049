"""How many CPU threads each rank's TensorFlow may use.

N ranks on one host, each with TensorFlow's default thread pools sized to the
whole machine, oversubscribe the cores (measured here: 2 ranks on 2 cores ran
at 0.43x the images/s of 1 rank). Each rank therefore gets its share: the
cores it is bound to when the launcher pinned it (``mpirun --bind-to core``),
else the host's cores divided by the ranks on this host. Set counts win:
``trainer.intra_op_threads`` / ``inter_op_threads``, then TensorFlow's own
``TF_NUM_INTRAOP_THREADS`` / ``TF_NUM_INTEROP_THREADS``, which a rank would
otherwise override (it sizes its pools itself).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadPlan:
    intra_op: int
    inter_op: int
    cores_visible: int
    reason: str


# TensorFlow's own variables (tensorflow/core/common_runtime/process_util.cc); as there, a value that is not a
# positive integer is ignored.
ENV_INTRA_OP, ENV_INTER_OP = "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"


def threads_from_environment(name: str) -> int:
    """The thread count an environment variable sets, or 0 where it sets none."""
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else 0


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity; cgroup quotas aside)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def plan_threads(local_size: int, intra_op: int = 0, inter_op: int = 0) -> ThreadPlan:
    """Thread counts for one rank; explicit non-zero settings win, then TensorFlow's environment variables."""
    machine = os.cpu_count() or 1
    visible = available_cores()
    if visible < machine:
        share, reason = visible, f"bound to {visible} of {machine} cores"
    else:
        share = max(1, machine // max(1, local_size))
        reason = f"{machine} cores / {local_size} local rank(s)"
    intra_env = 0 if intra_op else threads_from_environment(ENV_INTRA_OP)
    inter_env = 0 if inter_op else threads_from_environment(ENV_INTER_OP)
    for name, value in ((ENV_INTRA_OP, intra_env), (ENV_INTER_OP, inter_env)):
        reason += f", {name}={value}" if value else ""
    return ThreadPlan(
        intra_op=intra_op or intra_env or share,
        # One inter-op thread per core share keeps the input pipeline and the
        # Horovod background thread from competing with the maths.
        inter_op=inter_op or inter_env or max(1, min(2, share)),
        cores_visible=visible,
        reason=reason,
    )
