"""The one exception family users see as a single line (no traceback).

Raise a subclass with a message that names what is wrong and says what to
do; ``app.main`` prints it as ``cifar_dist: error: <message>`` and exits 2.
A sweep's own errors, which Hydra prints itself, are in ``sweep_errors.py``:
this module imports nothing but the standard library, so that what runs beside
every rank (``launchers/ranks/rank_exec.py``) loads no Hydra for it.
"""

import difflib
from typing import Iterable


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean `epochs`?"`` for the nearest known name (difflib), else ``""``: the hint
    every one-line error about a misspelt name ends with (config keys, options, builder parameters)."""
    match = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean `{match[0]}`?" if match else ""


class CifarDistError(Exception):
    """A problem the user can fix; the message is one line that says how."""


class ConfigError(CifarDistError, ValueError):
    """Bad config values; the message is one line listing every problem."""


class LaunchError(CifarDistError, RuntimeError):
    """A problem found before or while launching; its message is one line that says what to do. (Here, not in
    launchers/base.py, which hands it on: the rank machinery of launchers/ranks/ raises it too, below the
    launchers.)"""
