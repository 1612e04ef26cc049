"""absl's logging handler in a pytest process: writing to whatever ``sys.stderr`` is, never closing it.

TensorFlow, JAX and Keras import ``absl.logging``, whose handler keeps the ``sys.stderr`` of that moment: in a test
process, pytest's capture. When logging is configured again (Hydra's in-process jobs: ``logging.config.dictConfig``
shuts every handler down) while ``sys.stderr`` is another stream (a test's ``capsys``), absl's handler closes the
stream it kept, since it is no longer ``sys.stderr``: pytest's capture, closed, and every later test of that
worker errs with "I/O operation on closed file". Which worker imports absl first depends on the schedule, so the
suite failed at random (make test of 2026-11-28 10:02, 671 errors on one worker)."""

from __future__ import annotations

import importlib.util
import sys


class CurrentStderr:
    """``sys.stderr`` as it is at each write; closing it closes nothing (the stream is pytest's)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def close(self) -> None:
        pass


def absl_writes_to_the_current_stderr() -> None:
    """Point absl's Python handler at ``CurrentStderr`` (absl imported now, where it is installed)."""
    if importlib.util.find_spec("absl") is None:
        return
    import absl.logging

    absl.logging.get_absl_handler().python_handler.stream = CurrentStderr()
