"""Run one runner process (mpirun, horovodrun) to the end, and never leave ranks behind.

The runner is started in its own session so that Ctrl-C reaches only this
launcher, which then stops the job in order: SIGINT to the runner (mpirun and
horovodrun both tear their ranks down on it), SIGKILL to the whole process
tree after a grace period, and a second Ctrl-C kills at once; SIGTERM and
SIGHUP (a closed terminal, a dropped ssh session) stop it the same way. If
this launcher dies without a chance to do so (kill -9), the runner gets
SIGTERM from the kernel (PR_SET_PDEATHSIG) and tears its ranks down, and each
rank's wrapper (rank_exec) stops its rank when its own parent goes. The tree is
tracked while the job runs because MPI ranks live in process groups of their
own and are re-parented once their runner has gone, so a process-group kill
would miss them. Output is streamed to the console and copied to a log file.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# What the runner gets when this launcher dies: mpirun and horovodrun both
# stop their ranks (on every host) on SIGTERM, as on Ctrl-C.
RUNNER_DEATH_SIGNAL = signal.SIGTERM
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class Supervised:
    returncode: int
    tail: str  # the runner's last output (its own error messages, rank 0's last lines)
    interrupted: bool = False  # stopped by Ctrl-C / SIGTERM to the launcher
    stopped_reason: str = ""  # set when a watch callback asked to stop the job
    seconds: float = 0.0


def _start_time(pid: int) -> Optional[str]:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks


def _children(pid: int) -> List[int]:
    kids: List[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            kids += [int(p) for p in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return kids


def process_tree(pid: int) -> Dict[int, Optional[str]]:
    """Every descendant of ``pid`` (not itself), with its start time to spot reused pids."""
    found: Dict[int, Optional[str]] = {}
    todo = _children(pid)
    while todo:
        child = todo.pop()
        if child in found:
            continue
        found[child] = _start_time(child)
        todo += _children(child)
    return found


def _set_child_subreaper(on: bool) -> bool:
    """Adopt orphaned descendants (Linux): ranks whose runner has exited are
    re-parented to this process instead of init, so they can still be found."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stop_with_launcher(launcher_pid: int) -> None:  # runs in the runner between fork and exec
    """Ask the kernel to SIGTERM this process when the launcher dies (even by kill -9)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, RUNNER_DEATH_SIGNAL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != launcher_pid:  # it died before the prctl took effect
        os.kill(os.getpid(), RUNNER_DEATH_SIGNAL)


def _reap_adopted() -> None:
    """Collect the exit status of adopted descendants that have ended (no zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_tree(known: Dict[int, Optional[str]], sig: int = signal.SIGKILL) -> int:
    """Signal every still-running process of ``known`` that is still the same process."""
    hit = 0
    for pid, started in known.items():
        if started is not None and _start_time(pid) == started:
            try:
                os.kill(pid, sig)
                hit += 1
            except ProcessLookupError:
                pass
    return hit


class Supervisor:
    """Start ``argv``, stream its output, stop it on request or when ``watch`` says so.

    ``watch`` is called about twice a second while the job runs; a non-empty
    string it returns stops the job (runner first, then the tree) and becomes
    ``stopped_reason``. ``line_filter`` rewrites each output line before it
    reaches the console (used to drop horovodrun's per-line rank prefix); the
    log file always gets the raw output.
    """

    def __init__(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Dict[str, str],
        log_file: Path,
        kill_grace_s: float = 10.0,
        watch: Optional[Callable[[], str]] = None,
        line_filter: Optional[Callable[[bytes], bytes]] = None,
        console=None,
    ):
        self.argv = list(argv)
        self.cwd = cwd
        self.env = env
        self.log_file = Path(log_file)
        self.kill_grace_s = kill_grace_s
        self.watch = watch
        self.line_filter = line_filter
        self.console = console if console is not None else sys.stdout.buffer
        self._tail = collections.deque(maxlen=200)
        self._interrupts = 0

    def run(self) -> Supervised:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        before = set(_children(os.getpid()))
        subreaper = _set_child_subreaper(True)
        # mpirun/horovodrun: a long-lived child, so no timeout (cifar_dist/common/external_commands.py is for short
        # commands); supervised instead: Ctrl-C and the watch stop it, then the kill grace, then its tree.
        proc = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=functools.partial(_stop_with_launcher, os.getpid()),
        )
        reader = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
        reader.start()
        previous = self._install_signal_handlers()
        tree: Dict[int, Optional[str]] = {}
        stop_at: Optional[float] = None
        reason = ""
        try:
            while proc.poll() is None:
                tree.update(process_tree(proc.pid))
                if not reason and self.watch is not None:
                    reason = self.watch() or ""
                if (self._interrupts or reason) and stop_at is None:
                    self._signal(proc, signal.SIGINT)
                    stop_at = time.monotonic() + self.kill_grace_s
                if self._interrupts > 1 or (stop_at is not None and time.monotonic() > stop_at):
                    kill_tree(tree)
                    self._signal(proc, signal.SIGKILL)
                try:
                    proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            self._restore_signal_handlers(previous)
            # Ranks the runner failed to take down with it: adopted by this
            # process (subreaper) or, failing that, known from the last snapshot.
            if subreaper:
                for orphan in set(_children(os.getpid())) - before:
                    tree[orphan] = _start_time(orphan)
                    tree.update(process_tree(orphan))
            killed = kill_tree(tree)
            if subreaper:
                if killed:  # give what was just SIGKILLed a moment to die before collecting it
                    time.sleep(0.1)
                _reap_adopted()
                _set_child_subreaper(False)
            reader.join(timeout=5)
        return Supervised(
            returncode=proc.returncode,
            tail=b"".join(self._tail).decode(errors="replace"),
            interrupted=bool(self._interrupts),
            stopped_reason=reason,
            seconds=time.monotonic() - start,
        )

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def _pump(self, stream) -> None:
        pending = b""
        with open(self.log_file, "ab") as log:
            while True:
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    break
                log.write(chunk)
                log.flush()
                self._tail.append(chunk)
                if self.line_filter is None:
                    self._show(chunk)
                    continue
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._show(self.line_filter(line) + b"\n")
            if pending:
                self._show(self.line_filter(pending) if self.line_filter else pending)

    def _show(self, data: bytes) -> None:
        try:
            self.console.write(data)
            self.console.flush()
        except (OSError, ValueError):
            pass

    def _on_signal(self, signum, _frame) -> None:
        self._interrupts += 1
        if self._interrupts == 1:
            try:  # after SIGHUP the terminal may be gone
                sys.stderr.write("\nstopping all ranks (press Ctrl-C again to kill them now)...\n")
            except (OSError, ValueError):
                pass

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}

    @staticmethod
    def _restore_signal_handlers(previous) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
