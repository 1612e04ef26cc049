"""The one exception family users see as a single line (no traceback).

Raise a subclass with a message that names what is wrong and says what to
do; ``app.main`` prints it as ``cifar_dist: error: <message>`` and exits 2.
"""

import difflib
from typing import Iterable

from hydra.errors import CompactHydraException


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean `epochs`?"`` for the nearest known name (difflib), else ``""``: the hint
    every one-line error about a misspelt name ends with (config keys, options, builder parameters)."""
    match = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean `{match[0]}`?" if match else ""


class CifarDistError(Exception):
    """A problem the user can fix; the message is one line that says how."""


class ConfigError(CifarDistError, ValueError):
    """Bad config values; the message is one line listing every problem."""


class PointFailed(CompactHydraException):
    """A sweep point that failed: Hydra records it FAILED and, once the batch has run,
    prints this one line (no traceback) and exits with status 1."""


class StudyStopped(CompactHydraException):
    """An optimising sweep stopped early (too many failed trials): one line, what was kept, what to change."""


class SweepRefused(CompactHydraException):
    """An optimising sweep that cannot start (Optuna missing, a setting out of range, a storage Optuna cannot
    open): one line that says what to do, before any trial runs."""
