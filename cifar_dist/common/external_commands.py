"""Running a short external command (sbatch, squeue, ssh, ip, git, pip wheel): the one timeout policy.

Every such command runs to completion with its output captured as text and
its stdin closed, under a timeout: ``DEFAULT_TIMEOUT_S`` unless the caller
has a setting of its own (``launcher.host_check_timeout_s``) or one of the
named cases below. A command that does not finish in time is killed and
reported in one line, the same way everywhere: what it was doing, the
command, and what to do.

Long-lived children (the ranks under ``rank_exec``, mpirun/horovodrun under
``runner_supervisor``) are not short commands: they run without a timeout,
supervised (signals forwarded, heartbeats, the launcher's own stop).
"""

from __future__ import annotations

import shlex
import subprocess
from typing import Mapping, Optional, Sequence, Type

from cifar_dist.common.errors import CifarDistError

DEFAULT_TIMEOUT_S = 60.0  # a command that asks a service (Slurm's controller) or another host
LOCAL_QUERY_TIMEOUT_S = 10.0  # a command that only reads this machine (ip addr, git rev-parse)
BUILD_TIMEOUT_S = 600.0  # building this package's wheel (pip wheel, no downloads)


class CommandTimedOut(CifarDistError):
    """An external command that did not finish within its timeout (and was killed)."""


def run_command(
    argv: Sequence[str],
    what: str,
    fix: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: Optional[Mapping[str, str]] = None,
    error: Type[CifarDistError] = CommandTimedOut,
) -> subprocess.CompletedProcess:
    """``argv`` run to completion (text output captured, stdin closed).

    Past ``timeout_s`` it raises ``error`` (a launcher passes its LaunchError):
    "<what> did not answer within <timeout_s>s (<command>); <fix>". A missing
    program raises FileNotFoundError, which each caller words with its own install hint.
    """
    try:
        return subprocess.run(
            list(argv),
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise error(f"{what} did not answer within {timeout_s:g}s ({shlex.join(argv)}); {fix}") from None
