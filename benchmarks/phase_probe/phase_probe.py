"""Timestamps of a cifar_dist run's phases, taken from outside the package.

``install(path)`` (called from this folder's sitecustomize.py) records when
this process started and when the interpreter was ready, then wraps, as their
modules finish importing, the functions that bound each phase of a run
(``SPANS``: the app's entry and launcher, the trainer's steps, the final test,
the model save) and prepends/appends a Keras callback to the trainer's
callbacks that marks each epoch's training, validation and epoch-end
callbacks (and times each callback's epoch-end hook). Every event is one JSON
line appended to ``path`` (one short ``write`` per line with O_APPEND, so the
ranks' lines never interleave): ``{"pid", "rank", "event", "t"}`` plus extras.

No per-step hook: the run's steps are untouched. A function a later version
of the package renamed or removed would not be timed (the breakdown merges
its phase into the previous one): ``bench_phases.missing_functions()`` names
it first, and the bench refuses to run (tests/project/test_bench_names.py).
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.util
import json
import os
import sys
import time

# module -> functions (module attributes) whose enter and exit are recorded
SPANS = {
    "cifar_dist.app": ("main", "select_launcher", "record_end", "end_of_job"),
    "cifar_dist.training.trainer": (
        "train",
        "start_run",
        "start_engine",
        "load_data",
        "build_model",
        "restore_or_start",
        "make_streams",
        "open_tracker",
        "finish",
    ),
    "cifar_dist.training.exact_test": ("evaluate_exact",),
    "cifar_dist.training.run_records": ("start_record", "write_record", "plot_learning_curves", "write_json"),
    "cifar_dist.training.recipe.hooks": ("final_test", "sync_model", "fit_to_data"),
    "cifar_dist.training.model_setup": ("probe_model_flavor", "instantiate_model"),
    "cifar_dist.rundir.checkpoints": ("atomic_save_model",),
}
CALLBACK_HOOKS = ("on_epoch_end", "on_test_begin")
_STATE = {}  # path and rank of this process (set once by install)


def rank() -> int | None:
    for name in ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return None


def emit(event: str, t: float | None = None, **extra) -> None:
    record = {"pid": os.getpid(), "rank": _STATE["rank"], "event": event, "t": time.time() if t is None else t, **extra}
    fd = os.open(_STATE["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def process_start_time() -> float:
    """This process's start (exec) in time.time() terms, from /proc (10 ms resolution)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - start_ticks / ticks)


def watch_for_a_stall(where: str) -> None:
    """With CIFAR_DIST_PHASE_STACKS=S: every thread's Python stack into <log>.stacks-<pid> if the next timed
    function is not entered within S seconds (a diagnosis of an unexplained wait)."""
    seconds = float(os.environ.get("CIFAR_DIST_PHASE_STACKS") or 0)
    if seconds > 0:
        import faulthandler

        stacks = open(f"{_STATE['path']}.stacks-{os.getpid()}", "a")
        stacks.write(f"--- {where}: stacks after {seconds} s\n")
        stacks.flush()
        _STATE["stacks"] = stacks
        faulthandler.dump_traceback_later(seconds, repeat=True, file=stacks)


def timed(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _STATE.pop("stacks", None) is not None:
            import faulthandler

            faulthandler.cancel_dump_traceback_later()
        emit(name + ":enter")
        try:
            result = fn(*args, **kwargs)
        finally:
            emit(name + ":exit")
        if name == "cifar_dist.app.select_launcher" and hasattr(result, "launch"):
            result.launch = timed("launcher.launch", result.launch)
        if name == "cifar_dist.training.trainer.make_callbacks":
            result = with_epoch_marks(result)
        return result

    return wrapper


def timed_hook(label: str, hook):
    @functools.wraps(hook)
    def wrapper(*args, **kwargs):
        start = time.time()
        try:
            return hook(*args, **kwargs)
        finally:
            emit("callback", start, hook=label, seconds=time.time() - start)

    return wrapper


def with_epoch_marks(callbacks):
    """The trainer's callbacks between a first and a last marker; each one's epoch-end hooks timed."""
    from cifar_dist.common.keras_callback import Callback  # both Keras' fit call it; no TensorFlow needed

    class Mark(Callback):
        def __init__(self, where: str):
            super().__init__()
            self.where = where

        def _mark(self, what, epoch=None):
            emit(f"fit.{what}.{self.where}", epoch=epoch)

        def on_train_begin(self, logs=None):
            self._mark("train_begin")

        def on_train_end(self, logs=None):
            self._mark("train_end")
            if self.where == "last":
                watch_for_a_stall("after fit")

        def on_epoch_begin(self, epoch, logs=None):
            self._mark("epoch_begin", epoch)

        def on_epoch_end(self, epoch, logs=None):
            self._mark("epoch_end", epoch)

        def on_test_begin(self, logs=None):
            self._mark("test_begin")

        def on_test_end(self, logs=None):
            self._mark("test_end")

    for cb in callbacks:
        for hook in CALLBACK_HOOKS:
            setattr(cb, hook, timed_hook(f"{type(cb).__name__}.{hook}", getattr(cb, hook)))
    return [Mark("first"), *callbacks, Mark("last")]


class _PatchAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds SPANS' modules through the normal finders, then wraps their functions once they have run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in SPANS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Wrapping(spec.loader)
        return spec


class _Wrapping(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        names = SPANS[module.__name__]
        if module.__name__ == "cifar_dist.training.trainer":
            names = names + ("make_callbacks",)
        for name in names:
            if callable(getattr(module, name, None)):
                setattr(module, name, timed(f"{module.__name__}.{name}", getattr(module, name)))


def install(path: str) -> None:
    _STATE.update(path=path, rank=rank())
    emit("process_start", process_start_time(), argv=sys.orig_argv[1:])
    emit("interpreter_ready")
    atexit.register(emit, "process_exit")  # registered first, so it runs after the other atexit handlers
    sys.meta_path.insert(0, _PatchAfterImport())
