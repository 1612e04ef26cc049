"""Python's cyclic garbage collector while a training command imports TensorFlow's objects, and as it ends.

A process that imports TensorFlow, tf-keras and Horovod (or Keras 3 and JAX) holds ~800,000 objects that the
collector tracks, nearly all of them for the life of the process (modules, classes, functions, their dicts).
While they are imported the heap grows from nothing, and each time it has grown by a quarter the collector walks
all of it again (about 1.3 CPU-s of a rank's ~5 s of imports), finding almost nothing to free.

``framework_imports()`` pauses the collector while the engine imports its framework. In the command's own
process (``python -m cifar_dist``, the ``cifar-dist`` script, a rank: ``process_role.is_command_process``) it
then collects once, so that the imports' garbage is freed, and freezes what is alive (``gc.freeze``: CPython's
permanent generation, which no later collection walks). A library call (a user's script or notebook that calls
cifar_dist) is never frozen: its objects are the caller's, who may keep running for hours.

Frozen objects are still freed by their reference counts, but a frozen cycle is never collected, and its
finalisers (a file's flush on close) would never run. So ``unfreeze_at_exit()``, as the command ends, hands
every frozen object back to the collector: the interpreter's shutdown then collects and finalises as it does for
plain ``python``, and a file a user's builder, factory or callback never closed is written whole. (The shutdown's
collections cost ~1 CPU-s per process; skipping them lost such files: issue 47.) Measured: docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

from cifar_dist.common.process_role import is_command_process

# What the interpreter itself keeps in the permanent generation before any code of ours runs: 375 objects in
# CPython 3.12.1, none in 3.11 or 3.13. The engine's start freezes where no more than these are frozen.
FROZEN_BY_THE_INTERPRETER = gc.get_freeze_count()


@contextlib.contextmanager
def framework_imports() -> Iterator[None]:
    """The collector paused for the block (the engine's import of its framework); then, in the command's own
    process, one collection and everything alive frozen.

    Frozen only where nothing but the interpreter's own objects is frozen yet (the process's first engine start;
    Python 3.12 starts with some: ``FROZEN_BY_THE_INTERPRETER``): a later one, such as the next point of a sweep run
    in this process, finds its framework loaded, and freezing then would keep the cycles the points before it
    leave for the life of the process. The collector is on again afterwards only if it was on before."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if is_command_process() and gc.get_freeze_count() <= FROZEN_BY_THE_INTERPRETER:
            gc.collect()  # the imports' garbage freed, not kept forever
            gc.freeze()
        if was_enabled:
            gc.enable()


def unfreeze_at_exit() -> None:
    """As the command ends: every frozen object back in the collector's care, so that the interpreter's shutdown
    finalises every cycle (flushing the files in them) as plain ``python`` does."""
    gc.unfreeze()
