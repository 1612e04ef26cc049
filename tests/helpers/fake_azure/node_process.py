"""One attempt of a job's command on a fake node, as both doubles (Batch AI's
``nodes.NodeRun``, Azure ML's ``fake_azureml.runner.NodeRun``) run it: a local
subprocess in its own session, so that killing it takes its whole process
group, as losing the node would.

Preemption: with ``preempt``, the process group is killed (SIGKILL) as soon as
``run_dir/checkpoints`` holds a finished checkpoint; the double then puts the
job back in its queue and the next attempt starts a fresh process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Dict, List, Optional, Sequence, Union

CHECKPOINT = re.compile(r"^checkpoint-\d{3,}\.h5$")


class NodeProcess:
    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Dict[str, str],
        cwd: Path,
        stdout: IO,
        stderr: Union[IO, int],
        run_dir: Path,
        preempt: bool,
    ):
        self.run_dir = run_dir
        self.preempted = False  # killed by the fake's "preemption", not failed on its own
        self.checkpoints_at_kill: List[str] = []
        self.proc = subprocess.Popen(
            list(argv),
            env=env,
            cwd=cwd,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        if preempt:
            threading.Thread(target=self._preempt_after_first_checkpoint, daemon=True).start()

    def _preempt_after_first_checkpoint(self) -> None:
        folder = self.run_dir / "checkpoints"
        while self.proc.poll() is None:
            done = (
                sorted(p.name for p in folder.glob("checkpoint-*.h5") if CHECKPOINT.match(p.name))
                if folder.is_dir()
                else []
            )
            if done:
                self.checkpoints_at_kill = done
                self.preempted = True
                self.kill()
                return
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def exit_code(self) -> Optional[int]:
        return self.proc.poll()
