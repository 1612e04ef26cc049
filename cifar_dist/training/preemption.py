"""Stop training cleanly on a signal: the time limit or preemption is near.

A cluster launcher names the signal in ``CIFAR_DIST_STOP_SIGNAL`` (Slurm:
USR1, sent ``launcher.signal_grace_s`` before the time limit). The handler
only sets a flag; at the end of each epoch every rank learns whether any
rank got the signal (one small allreduce), and if so all of them stop after
that epoch, whose checkpoint rank 0 has just written. The job then requeues
and resumes from it in the same run dir (``trainer.resume=auto``).
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Mapping, Optional

from cifar_dist.common.keras_callback import Callback
from cifar_dist.common.process_role import STOP_SIGNAL_ENV

log = logging.getLogger(__name__)


class StopOnSignal(Callback):
    """Installs its handler when made (before fit: the signal may come early) and keeps it
    after training, so that a late signal no longer kills the process (the launcher sees
    the run complete and does not requeue it)."""

    def __init__(self, signum: int, engine):
        super().__init__()
        self.signum = signum
        self.engine = engine
        self.requested = False
        signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        self.requested = True

    def on_epoch_end(self, epoch, logs=None):
        # The signal may reach the ranks at different moments; all of
        # them must stop after the same epoch, or one would wait forever in the
        # next epoch's collectives. Every rank takes part at every epoch end.
        if self.engine.any_rank(self.requested):
            log.warning(
                "stop signal %s: stopping after epoch %d (its checkpoint is written); the job resumes from it",
                signal.Signals(self.signum).name,
                epoch + 1,
            )
            self.model.stop_training = True


def stop_on_signal_from_env(environ: Optional[Mapping[str, str]] = None, engine=None) -> Optional[StopOnSignal]:
    """The callback when a launcher asked for it (``CIFAR_DIST_STOP_SIGNAL=USR1``), else None."""
    name = (os.environ if environ is None else environ).get(STOP_SIGNAL_ENV, "").strip().upper()
    if not name:
        return None
    return StopOnSignal(signal.Signals[name if name.startswith("SIG") else "SIG" + name], engine)
