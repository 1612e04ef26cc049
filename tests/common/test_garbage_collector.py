"""Python's collector around the engine's framework import and at the command's end
(cifar_dist/common/garbage_collector.py; what it saves: docs/benchmarks.md)."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

import pytest

import cifar_dist.common.garbage_collector as collector
from cifar_dist.common.garbage_collector import framework_imports, unfreeze_at_exit
from cifar_dist.common.process_role import RANK_GUARD_ENV, is_command_process
from helpers.cli import assert_ok, cli_env, run_cli


class Node:
    """An object the collector tracks, able to hold itself in a cycle."""


@pytest.fixture
def nothing_frozen():
    """A process with nothing frozen yet (as a command's is when its engine starts), restored afterwards."""
    gc.unfreeze()
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    gc.enable() if enabled else gc.disable()


@pytest.fixture
def in_the_command(nothing_frozen, monkeypatch):
    """As in ``python -m cifar_dist``'s process (pytest's own is a library call)."""
    monkeypatch.setattr(collector, "is_command_process", lambda: True)


def is_frozen(obj) -> bool:
    """Whether ``obj`` is in the permanent generation (no generation the collector walks lists it)."""
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


def cyclic_garbage():
    """A weak reference to a cycle no one holds any more: only a collection frees it."""
    left = Node()
    left.itself = left
    return weakref.ref(left)


def test_the_command_imports_the_framework_with_the_collector_paused_then_collects_and_freezes(in_the_command):
    with framework_imports():
        assert not gc.isenabled()
        imported = Node()
        garbage = cyclic_garbage()  # what the imports leave behind
    assert gc.isenabled()
    assert is_frozen(imported)
    assert garbage() is None  # collected before the freeze, not kept for the life of the process


def test_a_library_call_freezes_nothing(nothing_frozen):
    """A user's script or notebook calling cifar_dist (pytest is one): the collector is paused for the imports
    only; nothing of the caller's is frozen, a cycle left over is collected as ever."""
    assert not is_command_process()
    with framework_imports():
        assert not gc.isenabled()
        kept = Node()
        garbage = cyclic_garbage()
    assert gc.isenabled() and gc.get_freeze_count() == 0 and not is_frozen(kept)
    gc.collect()
    assert garbage() is None


def test_the_engine_start_freezes_where_the_interpreter_froze_objects_of_its_own(in_the_command, monkeypatch):
    """CPython 3.12 starts with objects in the permanent generation: the engine's first start still freezes."""
    gc.freeze()  # as such an interpreter starts
    monkeypatch.setattr(collector, "FROZEN_BY_THE_INTERPRETER", gc.get_freeze_count())
    with framework_imports():
        imported = Node()
    assert is_frozen(imported)


def test_a_second_engine_start_freezes_nothing_the_first_point_left(in_the_command):
    with framework_imports():
        pass
    left = cyclic_garbage()
    with framework_imports():
        assert not gc.isenabled()
    gc.collect()
    assert left() is None


def test_a_collector_turned_off_stays_off(in_the_command):
    gc.disable()
    with framework_imports():
        pass
    assert not gc.isenabled()


@pytest.mark.parametrize("ending", [SystemExit(1), KeyboardInterrupt()])
def test_the_command_unfreezes_everything_however_it_ends(in_the_command, monkeypatch, ending):
    """``python -m cifar_dist``'s end hands what the engine's start froze back to the collector: on an error, on
    Ctrl-C, as a rank."""
    import cifar_dist.__main__ as command
    import cifar_dist.app

    def app_main():
        with framework_imports():  # the engine's start
            pass
        assert gc.get_freeze_count()
        raise ending

    monkeypatch.setattr(cifar_dist.app, "main", app_main)
    monkeypatch.setattr(sys, "argv", ["cifar_dist"])
    monkeypatch.setenv(RANK_GUARD_ENV, "1")  # a rank's end: the exception goes on, as Python's own
    with pytest.raises(type(ending)):
        command.main()
    assert gc.get_freeze_count() == 0


def test_unfreeze_at_exit_gives_every_frozen_object_back(nothing_frozen):
    alive = Node()
    gc.freeze()
    unfreeze_at_exit()
    assert not is_frozen(alive) and gc.get_freeze_count() == 0


def test_only_the_command_s_own_process_counts_as_the_command():
    """``python -m cifar_dist`` and the ``cifar-dist`` script (a ``__main__`` calling the command's ``main``) are the
    command; a script of the user's that imports cifar_dist is a library call."""
    probe = "from cifar_dist.common.process_role import is_command_process; print(is_command_process())"
    as_script = f"from cifar_dist.__main__ import main\n{probe}"  # what pip's cifar-dist script does first
    said = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()
        for code in (probe, as_script)
    ]
    assert said == ["False", "True"]


# A user's code that writes to a file it never closes, held in a cycle (as most objects of a framework or a
# callback are) that a module keeps: plain `python` flushes it at exit, when the shutdown collects the cycle.
UNCLOSED_LOG = """
class Log:
    def __init__(self, path):
        self.itself = self
        self.file = open(path, "w")
"""


def test_a_file_the_users_builder_never_closes_is_whole_after_the_command(tmp_path):
    """Issue 47, item 4: the builder's log, opened after the engine's start, was 0 bytes after a run."""
    (tmp_path / "unclosed_builder.py").write_text(
        UNCLOSED_LOG
        + textwrap.dedent(f"""
        LOG = Log({str(tmp_path / "builder.log")!r})

        def build(num_classes, **settings):
            LOG.file.write("built\\n" * 1000)
            raise ValueError("the test's builder stops the run here")
        """)
    )
    env = cli_env(PYTHONPATH=str(tmp_path))
    overrides = ("data=sample", "model._target_=unclosed_builder.build", f"hydra.run.dir={tmp_path / 'run'}")
    proc = run_cli(*overrides, env=env, timeout=300)
    assert proc.returncode == 2 and "the test's builder stops the run here" in proc.stderr, proc.stderr[-3000:]
    assert (tmp_path / "builder.log").read_text() == "built\n" * 1000


@pytest.mark.jax_stack  # Python 3.12 there, whose interpreter starts with objects of its own frozen
def test_a_cycle_alive_when_the_engine_starts_is_finalised_at_the_command_s_end(tmp_path):
    """The command's own end (``cifar_dist.__main__``), its engine start frozen in between: a cycle that was
    alive then (a user's callback made before the engine starts) and its file opened after is written whole.
    The start freezes in a fresh interpreter of every Python (3.12's starts with 375 objects frozen: the engine
    froze nothing there until this checked it)."""
    script = UNCLOSED_LOG + textwrap.dedent(f"""
        import gc, runpy, sys
        import cifar_dist.app
        from cifar_dist.common.garbage_collector import framework_imports

        def job():
            global LOG
            LOG = Log.__new__(Log)
            LOG.itself = LOG  # alive when the engine starts: frozen with the framework
            with framework_imports():  # the engine's start
                imported = Log.__new__(Log)
            frozen = gc.is_tracked(imported) and not any(o is imported for o in gc.get_objects())
            assert frozen, "python -m cifar_dist is the command: its engine start freezes what it imported"
            LOG.file = open({str(tmp_path / "callback.log")!r}, "w")
            LOG.file.write("epoch\\n" * 1000)

        cifar_dist.app.main = job
        sys.argv = ["cifar_dist"]
        runpy.run_module("cifar_dist", run_name="__main__", alter_sys=True)  # python -m cifar_dist
        """)
    assert_ok(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120))
    assert (tmp_path / "callback.log").read_text() == "epoch\n" * 1000
