"""Importing a framework without the optional packages it tries to import for features a training process never
uses: the one home of the trick, ``sys.modules[name] = None`` while the framework loads.

TensorFlow (its Lite converter tries JAX), tf-keras (its data adapter tries pandas) and Keras 3 (scikit-learn
for ``keras.wrappers``, pandas for ``fit``'s DataFrames, matplotlib's pyplot for ``keras.visualization``) import
those packages whenever they are installed (MLflow, the tracking extra, brings scikit-learn and pandas; JAX comes
with the jax extra), inside ``try: ... except ImportError`` blocks that fall back when they are missing. Loaded
anyway, they cost a training process seconds of start-up and, for JAX, its own threads. ``hidden`` makes them
look missing to the framework's import only: a package already loaded is left alone, and afterwards each imports
as before for whoever asks (a model builder, MLflow, cifar_dist's plots). The framework keeps its fallbacks for the
process's life (Keras' scikit-learn wrappers then say they need scikit-learn if called).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator


@contextlib.contextmanager
def hidden(*names: str) -> Iterator[None]:
    """While the block runs, ``import <name>`` fails for each of ``names`` not loaded yet (what Python's import
    system reads as "not installed"); afterwards they import as before."""
    marked = [name for name in names if name not in sys.modules]
    for name in marked:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in marked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
