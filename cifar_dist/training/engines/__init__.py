"""Engines: what makes N processes one data-parallel training job.

The trainer and the evaluation talk to an engine, never to Horovod (or, next,
JAX) directly. An engine knows this process's place in the job (``world``:
rank, size, threads, GPU), averages gradients (by wrapping the optimizer),
copies rank 0's model to every rank, averages variables and epoch metrics,
and moves small Python objects between ranks. One module per engine:

* ``horovod.py``: Horovod 0.28 over MPI or Gloo, for Keras 2 (tf.keras, through
  Horovod's own Keras layer) and Keras 3 on TensorFlow (Horovod's TF ops).

``start_engine`` is the one entry: it imports the engine's module only when
that engine is used (a Horovod run imports nothing of another engine).
"""
from __future__ import annotations

ENGINES = ("horovod",)


def start_engine(name: str, trainer_cfg):
    """Start the named engine in this process (once, before any model is built) and return it."""
    if name == "horovod":
        from cifar_dist.training.engines.horovod import HorovodEngine  # lazy: only the engine this run uses

        return HorovodEngine.start(trainer_cfg)
    raise ValueError(f"engine={name!r}: cifar_dist has the engines {', '.join(ENGINES)}")
