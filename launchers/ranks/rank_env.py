"""The environment every rank gets, whichever launcher starts it: the one builder.

Every launcher that starts ranks (mpirun, Gloo, Slurm's batch script, an
Azure ML job, a Batch AI job) sets these for them:

* ``CIFAR_DIST_CHILD=1`` (``base.RANK_GUARD_ENV``): the rank runs the job
  in-process whatever launcher its config names, so nothing recurses;
* ``PYTHONUNBUFFERED=1``: rank output reaches the logs as it is written;
* ``TF_USE_LEGACY_KERAS``: the launching user's own value when they set one
  (an explicit ``0`` is kept: the rank then refuses Keras 3 in one line at
  start), else ``1``: the one rule, ``keras_flavor.legacy_keras``, the
  package applies to itself on import;
* ``PYTHONPATH`` with the user's own module roots first (``code_roots``: the
  dirs that hold a ``model._target_``/``data._target_`` module, from
  ``JobSpec.carried``; launchers/user_sources.py is the rule), then the launching
  process's own PYTHONPATH (not for a snapshot job, ``same_files=False``: the
  launching machine's paths mean nothing there);
* Horovod's stall check, when the launcher asks for one;
* the launcher's extras (the stop signal for Slurm), then the user's
  ``launcher.env``, which wins.

Also what every rank's wrapper is given, whichever launcher starts it: the
folder the ranks log into (``LOG_DIR``) and the overrides of a rank other
than 0 (``NONCHIEF_OVERRIDES``).

Light on purpose (no TensorFlow): the trainer's stop-signal callback reads
``STOP_SIGNAL_ENV`` from here.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, Optional, Sequence

from cifar_dist.common.keras_flavor import LEGACY_KERAS_ENV, legacy_keras
from cifar_dist.common.process_role import RANK_GUARD_ENV, STOP_SIGNAL_ENV  # noqa: F401  (STOP_SIGNAL_ENV: launchers take it from here)
from cifar_dist.config.override_syntax import quote_override_value

LOG_DIR = "logs"  # every rank's log and exit record (rank_exec.py), and the runner's output, under the run dir

# Ranks other than 0 log to their own console (-> logs/rank.N.log) only, with
# Hydra's usual line format, so that N ranks never append to the run's one
# <job name>.log file (rank 0 and the launching process keep writing it).
NONCHIEF_OVERRIDES = (
    "hydra/job_logging=stdout",
    "hydra.job_logging.formatters.simple.format="
    + quote_override_value("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"),
)


def stall_check_env(stall_shutdown_s: int) -> Dict[str, str]:
    """Horovod's stall check: warn at half the time, shut the job down at ``stall_shutdown_s`` (0: off)."""
    if stall_shutdown_s <= 0:
        return {}
    return {
        "HOROVOD_STALL_CHECK_TIME_SECONDS": str(max(1, stall_shutdown_s // 2)),
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": str(stall_shutdown_s),
    }


def python_path(roots: Sequence[str], environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``roots`` first, then the launching process's own PYTHONPATH (None when both are empty)."""
    current = (os.environ if environ is None else environ).get("PYTHONPATH", "")
    entries = list(dict.fromkeys([*roots, *(p for p in current.split(os.pathsep) if p)]))
    return os.pathsep.join(entries) or None


def rank_environment(
    user_env: Optional[Mapping[str, str]] = None,
    extra: Optional[Mapping[str, str]] = None,
    stall_shutdown_s: int = 0,
    environ: Optional[Mapping[str, str]] = None,
    code_roots: Sequence[str] = (),
    same_files: bool = True,
) -> Dict[str, str]:
    """Every variable a rank needs, in that order: the fixed ones, PYTHONPATH when ``code_roots`` are
    given, the stall check, ``extra``, then ``user_env``.

    ``environ`` is the launching process's environment (default: os.environ),
    where the user's own TF_USE_LEGACY_KERAS and PYTHONPATH are looked up;
    ``same_files``: the ranks see this machine's files (False: a job that runs
    from a snapshot, whose ``code_roots`` are relative to it).
    """
    env = {
        RANK_GUARD_ENV: "1",
        "PYTHONUNBUFFERED": "1",
        LEGACY_KERAS_ENV: legacy_keras(os.environ if environ is None else environ),
    }
    path = python_path(list(code_roots), environ if same_files else {}) if code_roots else None
    if path:
        env["PYTHONPATH"] = path
    env.update(stall_check_env(stall_shutdown_s))
    env.update(extra or {})
    env.update({str(k): str(v) for k, v in (user_env or {}).items()})
    return env
