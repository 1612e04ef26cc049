"""Whether the console's stdout has a line left open, so that a one-line error starts a line of its own.

Keras' progress bar redraws one line with ``\\r`` and ends it only when the
epoch ends; an error raised mid-epoch (a diverged loss, a full disk) went to
stderr on the end of that line: ``63/63 [====] - loss: nancifar_dist: error: ...``.
``OpenLineTracker`` wraps ``sys.stdout`` for the job (``app.main``) and
remembers whether the last text written to it ended its line; ``end_open_line``
ends it before the error is printed. The state lives in the wrapper, the one
stream it describes.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


class OpenLineTracker:
    """A text stream that remembers whether its last write left a line open; anything else is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.line_open = False

    def write(self, text: str) -> int:
        if text:
            self.line_open = not text.endswith("\n")
        return self._stream.write(text)

    def close(self) -> None:
        """Nothing: the wrapped stream (the process's stdout) is not this wrapper's to close (``RedactingWriter``'s
        reason)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def end_open_line(stream: Any = None) -> None:
    """A newline on ``stream`` (``sys.stdout``) when its last write left a line open (a progress bar); else nothing."""
    stream = sys.stdout if stream is None else stream
    if getattr(stream, "line_open", False):
        stream.write("\n")
        stream.flush()
