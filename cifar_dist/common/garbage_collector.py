"""Python's cyclic garbage collector at the two moments a training process spends it on TensorFlow's objects.

A process that imports TensorFlow, tf-keras and Horovod (or Keras 3 and JAX) holds ~800,000 objects that the
collector tracks, nearly all of them for the life of the process (modules, classes, functions, their dicts).
The collector walks them at two moments, and finds almost nothing to free either time:

* while they are imported: the heap grows from nothing, and each time it has grown by a quarter the collector
  walks all of it again. About 1.3 CPU-s of a rank's ~5 s of imports; the walks find ~5,000 objects of garbage.
* when the process ends: the interpreter's shutdown collects every generation again (~1 CPU-s per process).

``framework_imports()`` pauses the collector while the engine imports its framework, then freezes what is alive
(``gc.freeze``: CPython's permanent generation, which no later collection walks); ``skip_final_collections()``
freezes everything as the command ends, so the shutdown walks nothing. Objects are still freed by their reference
counts, files and logs are closed by their owners and the ``atexit`` handlers (which run after it); what is left
is cyclic garbage the interpreter would only have collected on its way out. Measured: docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def framework_imports() -> Iterator[None]:
    """The collector paused for the block (the engine's import of its framework), then everything alive frozen.

    Only where nothing is frozen yet (the process's first engine start): a later one, such as the next point of a
    sweep run in this process, finds its framework loaded, and freezing then would keep the garbage the points
    before it left for the life of the process. The collector is on again afterwards only if it was on before."""
    if gc.get_freeze_count():
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def skip_final_collections() -> None:
    """Freeze every object, as the command ends: the interpreter's shutdown then collects nothing."""
    gc.freeze()
