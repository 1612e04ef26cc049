"""The end of a log file as the console last showed it: what every launcher prints when a rank or a
cluster job fails (the ranks' failure report, and the Slurm, Azure ML and Batch AI job followers)."""

from __future__ import annotations

import sys
from pathlib import Path


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` non-empty lines of a log, read from its last 32 KiB, as the console last showed them."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 32768))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    # Keras progress bars redraw with \r and \b: keep only what was last shown.
    shown = [line.rsplit("\r", 1)[-1].replace("\b", "") for line in text.splitlines()]
    return "\n".join([line for line in shown if line.strip()][-lines:])


def print_tail(path: Path, lines: int, what: str) -> None:
    """Write the tail of a job's log to stderr under a heading naming ``what`` (nothing when empty)."""
    text = tail(path, lines) if lines > 0 else ""
    if not text:
        return
    shown = text.splitlines()
    sys.stderr.write(f"--- last {len(shown)} lines of {what} ---\n{text}\n")
    sys.stderr.flush()
