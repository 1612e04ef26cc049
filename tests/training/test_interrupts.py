"""A Ctrl-C that Python could not raise (it landed in a __del__ or a weakref callback) still stops the run.

CI saw it: SIGINT arrived while SQLAlchemy's weakref callback ran under MLflow,
Python printed "Exception ignored in ... KeyboardInterrupt" and the 50-epoch
run trained to its end. Here the interrupt is lost on purpose, the same way:
SIGINT raised inside a ``__del__``.
"""

import signal
import sys

import numpy as np
import pytest
import tensorflow as tf

import cifar_dist  # noqa: F401  (tf.keras is Keras 2)
from cifar_dist.training.process.interrupts import interrupts_kept


@pytest.fixture(autouse=True)
def sigint_raises_keyboard_interrupt():
    """SIGINT as Python sets it in a terminal: a suite started in the background (``make test &`` in a script, nohup)
    inherits it ignored, and then no interrupt is raised, lost or kept (tests/helpers/terminal_signals.py)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class InterruptOnDelete:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)  # Python's handler raises here, where it cannot propagate


def lose_an_interrupt():
    InterruptOnDelete()  # dropped at once: its __del__ runs now


class LoseAnInterruptAt(tf.keras.callbacks.Callback):
    def __init__(self, batch):
        super().__init__()
        self.batch, self.batches_begun = batch, 0

    def on_train_batch_begin(self, batch, logs=None):
        self.batches_begun += 1
        if batch == self.batch:
            lose_an_interrupt()


def tiny_fit(callbacks, epochs=3):
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    x, y = np.zeros((64, 4), "float32"), np.zeros((64, 2), "float32")
    model.fit(x, y, batch_size=8, epochs=epochs, callbacks=callbacks, verbose=0)


def test_an_interrupt_lost_in_a_del_stops_fit_at_that_batch_end_and_prints_nothing(capsys):
    lose_at = LoseAnInterruptAt(batch=2)
    with pytest.raises(KeyboardInterrupt):
        with interrupts_kept() as kept:
            tiny_fit([kept, lose_at])
    assert lose_at.batches_begun == 3  # batches 0, 1, 2: stopped at the end of batch 2, not after 24 batches
    assert "KeyboardInterrupt" not in capsys.readouterr().err


def test_without_the_keeper_python_loses_it_and_fit_runs_to_the_end():
    """The premise: this is what happened in CI."""
    lost = []
    lose_at = LoseAnInterruptAt(batch=2)
    previous, sys.unraisablehook = sys.unraisablehook, lost.append
    try:
        tiny_fit([lose_at])
    finally:
        sys.unraisablehook = previous
    assert lose_at.batches_begun == 24  # 3 epochs of 8 batches
    assert [u.exc_type for u in lost] == [KeyboardInterrupt] * 3  # one lost at batch 2 of each epoch


def test_an_interrupt_lost_outside_fit_is_raised_when_the_block_ends():
    with pytest.raises(KeyboardInterrupt):
        with interrupts_kept():
            lose_an_interrupt()


def test_other_unraisable_exceptions_still_reach_the_previous_hook(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)

    class FailsOnDelete:
        def __del__(self):
            raise ValueError("from __del__")

    with interrupts_kept():
        FailsOnDelete()
    assert [u.exc_type for u in seen] == [ValueError]
    assert sys.unraisablehook == seen.append  # restored


def test_a_ctrl_c_that_cpython_reports_as_systemerror_counts_as_a_ctrl_c():
    """Seen once in the suite: SIGINT inside TensorFlow's C++ Flatten while it called Python's __import__."""
    from cifar_dist.app import is_disguised_interrupt

    def raised(exc, cause):
        try:
            raise exc from cause
        except BaseException as caught:  # noqa: B036 - what the app's handler sees
            return caught

    assert is_disguised_interrupt(
        raised(
            SystemError("<built-in function __import__> returned a result with an exception set"), KeyboardInterrupt()
        )
    )
    # Seen too: Flatten's own TypeError with that SystemError as its context, re-raised by tf_keras ``from None``.
    disguised = raised(
        SystemError("<built-in function __import__> returned a result with an exception set"), KeyboardInterrupt()
    )
    try:
        try:
            raise disguised
        except SystemError:
            raise TypeError  # noqa: B904 - as C++ raises it, inside the handling of the SystemError
    except TypeError as flatten_error:
        assert is_disguised_interrupt(raised(flatten_error.with_traceback(None), None))
    assert not is_disguised_interrupt(raised(TypeError("x"), ValueError("y")))
    assert not is_disguised_interrupt(raised(SystemError("a C extension's own bug"), ValueError("x")))
    assert not is_disguised_interrupt(SystemError("no cause"))
    assert not is_disguised_interrupt(raised(RuntimeError("x"), KeyboardInterrupt()))
