"""A sweep's errors, as Hydra prints them: one line, no traceback (Hydra's ``CompactHydraException``).

The rest of the one exception family is ``errors.py``, which imports no Hydra.
"""

from hydra.errors import CompactHydraException


class PointFailed(CompactHydraException):
    """A sweep point that failed: Hydra records it FAILED and, once the batch has run,
    prints this one line (no traceback) and exits with status 1."""


class StudyStopped(CompactHydraException):
    """An optimising sweep stopped early (too many failed trials): one line, what was kept, what to change."""


class SweepRefused(CompactHydraException):
    """An optimising sweep that cannot start (Optuna missing, a setting out of range, a storage Optuna cannot
    open): one line that says what to do, before any trial runs."""
