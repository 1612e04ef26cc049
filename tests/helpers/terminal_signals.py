"""Start the CLI under test with the signals a user's terminal gives it.

A test run started in the background (``cmd &`` in a script, nohup, some CI
runners) inherits SIGINT *ignored*, and Python then never turns SIGINT into
KeyboardInterrupt, so a test's Ctrl-C would reach a process that cannot see
it. A user's Ctrl-C reaches a foreground process with the default action:
pass ``preexec_fn=sigint_as_in_a_terminal`` to ``subprocess.Popen``.
"""

from __future__ import annotations

import signal


def sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
