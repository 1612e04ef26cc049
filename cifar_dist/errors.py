"""The one exception family users see as a single line (no traceback).

Raise a subclass with a message that names what is wrong and says what to
do; ``app.main`` prints it as ``cifar_dist: error: <message>`` and exits 2.
"""
from hydra.errors import CompactHydraException


class CifarDistError(Exception):
    """A problem the user can fix; the message is one line that says how."""


class ConfigError(CifarDistError, ValueError):
    """Bad config values; the message is one line listing every problem."""


class PointFailed(CompactHydraException):
    """A sweep point that failed: Hydra records it FAILED and, once the batch has run,
    prints this one line (no traceback) and exits with status 1."""


class StudyStopped(CompactHydraException):
    """An optimising sweep stopped early (too many failed trials): one line, what was kept, what to change."""
