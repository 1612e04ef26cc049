"""cifar_dist's Hydra callbacks fail closed: an error in one stops the command in one line.

Hydra 1.3 turns an exception a callback raises into a warning and goes on (``Callbacks._notify``), so a check of
cifar_dist's that broke on something unforeseen (the run-dir guard on a malformed saved config, the masking of
``.hydra/``'s secrets on an unreadable file) would let the run go on unchecked: over another run's files, with a
secret in clear. ``fails_closed`` wraps each hook: cifar_dist's own errors are their one line, anything else one
line naming the hook and the error (secrets masked), exit 2, before the job runs. ``SystemExit`` (a hook's own
refusal) passes as it is.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.redaction import redact_text


def fails_closed(hook: Callable[..., Any]) -> Callable[..., Any]:
    """A Hydra callback hook (``on_run_start``...) whose failure ends the command in one line, exit 2."""

    @functools.wraps(hook)
    def guarded(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return hook(self, *args, **kwargs)
        except CifarDistError as error:
            line = str(error)
        except Exception as error:  # noqa: BLE001 (anything: the point is to stop, not to go on unchecked)
            first = (str(error).strip().splitlines() or [""])[0][:300]
            line = (
                f"{type(self).__name__}.{hook.__name__} failed ({type(error).__name__}: {first}); nothing was run, "
                "so that nothing runs unchecked: report it with the command that gave it"
            )
        print(f"cifar_dist: error: {redact_text(line)}", file=sys.stderr, flush=True)
        raise SystemExit(2)

    return guarded
