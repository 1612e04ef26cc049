"""Ctrl-C stops a run even when it lands where Python cannot raise it.

Python turns SIGINT into ``KeyboardInterrupt`` at the next bytecode the main
thread runs. When that bytecode belongs to a ``__del__`` or a weakref callback
(SQLAlchemy's, under MLflow, runs them during garbage collection), the
exception cannot propagate: Python prints "Exception ignored in ..." and goes
on, and a 50-epoch run trains to its end after the user pressed Ctrl-C.

While :func:`interrupts_kept` is active, such a lost interrupt is kept rather
than printed (``sys.unraisablehook`` is where Python sends it) and raised
again at the next batch end, through the :class:`KeptInterrupt` callback, or
when the block ends, whichever comes first. Every other unraisable exception
still reaches the previous hook.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

from cifar_dist.common.keras_callback import Callback


class KeptInterrupt(Callback):
    """Raises the kept interrupt at the first batch end after it was lost (training, validation, test)."""

    def __init__(self):
        super().__init__()
        self.lost = False

    def keep(self, unraisable) -> bool:
        """True when ``unraisable`` was a lost Ctrl-C, now kept."""
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):
            return False
        self.lost = True
        return True

    def raise_if_lost(self) -> None:
        if self.lost:
            self.lost = False  # raised once: the handler of this KeyboardInterrupt decides what follows
            raise KeyboardInterrupt

    def on_train_batch_end(self, batch, logs=None):
        self.raise_if_lost()

    def on_test_batch_end(self, batch, logs=None):
        self.raise_if_lost()

    def on_predict_batch_end(self, batch, logs=None):
        self.raise_if_lost()


@contextmanager
def interrupts_kept() -> Iterator[KeptInterrupt]:
    """The callback to hand to ``fit``/``evaluate``; a Ctrl-C lost inside the block is raised by then."""
    keeper, previous = KeptInterrupt(), sys.unraisablehook

    def hook(unraisable) -> None:
        if not keeper.keep(unraisable):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield keeper
    finally:
        sys.unraisablehook = previous
    keeper.raise_if_lost()
