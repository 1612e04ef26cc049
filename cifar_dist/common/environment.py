"""The process environment read as a whole, safely: the one way cifar_dist copies ``os.environ``.

Iterating ``os.environ`` (``dict(os.environ)``, ``{**os.environ}``,
``.items()``, ``.copy()``) lists its keys, then looks each one up: a variable
another thread removes in between raises ``KeyError``. MLflow's telemetry
thread does exactly that (``_MLFLOW_TELEMETRY_SESSION_ID``), which made about
one tracking import in six fail. ``snapshot`` takes the keys at once (a
``list`` of the underlying dict, atomic under the GIL) and skips a key gone
by the time it is read.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, Optional


def snapshot(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """A copy of ``environ`` (default: ``os.environ``) that a thread changing it meanwhile cannot break."""
    source = os.environ if environ is None else environ
    values = ((key, source.get(key)) for key in list(source))
    return {key: value for key, value in values if value is not None}
