"""Python's collector around the engine's framework import and at the command's end
(cifar_dist/common/garbage_collector.py; what it saves: docs/benchmarks.md)."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest

from cifar_dist.common.garbage_collector import framework_imports, skip_final_collections
from cifar_dist.common.process_role import RANK_GUARD_ENV


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


def is_frozen(obj) -> bool:
    """Whether ``obj`` is in the permanent generation (no generation the collector walks lists it)."""
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


def test_the_framework_is_imported_with_the_collector_paused_then_kept_out_of_every_collection(nothing_frozen):
    with framework_imports():
        assert not gc.isenabled()
        imported = Node()
    assert gc.isenabled()
    assert is_frozen(imported)


def test_a_second_engine_start_freezes_nothing_the_first_point_left(nothing_frozen):
    with framework_imports():
        pass
    left = Node()
    left.itself = left  # a cycle: only the collector frees it
    freed = weakref.ref(left)
    del left
    with framework_imports():
        assert gc.isenabled()
    gc.collect()
    assert freed() is None


def test_a_collector_turned_off_stays_off(nothing_frozen):
    gc.disable()
    with framework_imports():
        pass
    assert not gc.isenabled()


@pytest.mark.parametrize("ending", [SystemExit(1), KeyboardInterrupt()])
def test_the_command_freezes_everything_however_it_ends(nothing_frozen, monkeypatch, ending):
    """``python -m cifar_dist``'s end skips the interpreter's final collections: on an error, on Ctrl-C, as a rank."""
    import cifar_dist.__main__ as command
    import cifar_dist.app

    def app_main():
        raise ending

    monkeypatch.setattr(cifar_dist.app, "main", app_main)
    monkeypatch.setattr(sys, "argv", ["cifar_dist"])
    monkeypatch.setenv(RANK_GUARD_ENV, "1")  # a rank's end: the exception goes on, as Python's own
    left = Node()
    with pytest.raises(type(ending)):
        command.main()
    assert is_frozen(left)


def test_skip_final_collections_freezes_what_is_alive(nothing_frozen):
    alive = Node()
    skip_final_collections()
    assert is_frozen(alive)
