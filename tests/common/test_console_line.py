"""A one-line error starts a line of its own after a progress bar (issue 37, item 14): Keras redraws its bar with
``\\r`` and ends the line only at the epoch's end, so an error mid-epoch was printed on the end of the bar."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time

from cifar_dist.common.console_line import OpenLineTracker, end_open_line
from helpers.cli import cli_env, tiny_cifar


def run_in_a_terminal(*overrides: str, cwd, timeout: float = 300) -> tuple:
    """``python -m cifar_dist`` with stdout and stderr on one pseudo-terminal, as a user's shell runs it."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cifar_dist", *overrides],
        stdout=child,
        stderr=child,
        stdin=subprocess.DEVNULL,
        env=cli_env(),
        cwd=cwd,
    )
    os.close(child)
    out, deadline = b"", time.time() + timeout
    try:
        while time.time() < deadline:
            ready, _, _ = select.select([main], [], [], 1)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the child side closed: everything was read
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return proc.returncode, out.decode(errors="replace")


def test_the_tracker_ends_an_open_line_once_and_only_then():
    stream = io.StringIO()
    tracker = OpenLineTracker(stream)
    end_open_line(tracker)
    tracker.write("log line\n")
    end_open_line(tracker)
    tracker.write("\r 3/16 [===>......]")
    end_open_line(tracker)
    end_open_line(tracker)
    assert stream.getvalue() == "log line\n\r 3/16 [===>......]\n"


def test_a_diverged_run_keeps_its_run_dir_and_its_error_starts_its_own_line_after_the_progress_bar(tiny_data, tmp_path):
    """Also the run dir's side (tests/rundir/test_run_dir_owner.py): a run that fails once started keeps its run
    dir, with the reason in its log."""
    run_dir = tmp_path / "run"
    code, out = run_in_a_terminal(
        *tiny_cifar(tiny_data),
        "optimizer=sgd",
        "optimizer.lr=1e30",
        "trainer.epochs=1",
        "trainer.batch_size=64",
        "trainer.plot=false",
        "trainer.verbose=1",  # the progress bar
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert code == 2 and "cifar_dist: error: training diverged" in out, out[-2000:]
    before = out.split("cifar_dist: error:", 1)[0]
    assert "[====" in before and before.endswith("\n"), repr(out[-600:])
    assert len([line for line in out.splitlines() if line.startswith("cifar_dist: error:")]) == 1, out[-2000:]
    assert "stopped: training diverged" in (run_dir / "cifar_dist.log").read_text()
