"""The command's console wrappers (``app.main`` wraps stdout in ``OpenLineTracker`` and stderr in
``RedactingWriter``) never close the process's streams: absl's logging handler, which the engine's TensorFlow or
JAX import creates inside them, closes the stream it kept at ``logging.shutdown`` (the interpreter's exit, or
Hydra's next logging configuration), and forwarded to the real stderr that lost every later line."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import pytest

from cifar_dist.common.console_line import OpenLineTracker
from cifar_dist.common.redaction import RedactingWriter
from helpers.cli import cli_env


@pytest.mark.parametrize("wrapper", [OpenLineTracker, RedactingWriter])
def test_closing_a_wrapper_leaves_its_stream_open(wrapper):
    stream = io.StringIO()
    wrapped = wrapper(stream)
    wrapped.write("kept\n")
    wrapped.close()
    assert not stream.closed and stream.getvalue() == "kept\n"


ABSL_INSIDE_THE_COMMAND = textwrap.dedent(
    """
    import contextlib, logging, sys
    from cifar_dist.common.redaction import RedactingWriter

    with contextlib.redirect_stderr(RedactingWriter(sys.stderr)):  # as app.main does
        import absl.logging  # as the engine's TensorFlow or JAX import does
    logging.shutdown()  # what the interpreter's exit runs
    sys.stderr.write("a line after logging's shutdown\\n")
    """
)


def test_absl_s_handler_does_not_close_the_process_s_stderr():
    pytest.importorskip("absl")
    proc = subprocess.run(
        [sys.executable, "-c", ABSL_INSIDE_THE_COMMAND], env=cli_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "a line after logging's shutdown" in proc.stderr, proc.stderr[-2000:]
