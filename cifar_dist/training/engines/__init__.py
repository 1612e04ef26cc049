"""Engines: what makes N processes one data-parallel training job.

The trainer and the evaluation talk to an engine, never to Horovod or JAX
directly. An engine knows this process's place in the job (``world``:
rank, size, threads, GPU), averages gradients (by wrapping the optimizer),
copies rank 0's model to every rank, averages variables and epoch metrics,
and moves small Python objects between ranks. One module per engine:

* ``horovod.py``: Horovod 0.28 over MPI or Gloo, for Keras 2 (tf.keras, through
  Horovod's own Keras layer) and Keras 3 on TensorFlow (Horovod's TF ops);
* ``jax.py``: Keras 3 on JAX, its processes joined by ``jax.distributed`` and
  the model made one over all of them by Keras' ``DataParallel``; no Horovod;
* ``tensorflow.py``: one process on TensorFlow alone, Keras 2 or 3; every
  collective is the identity (what a one-process job trains on without Horovod).

``engine=auto`` (the default) is none of them: ``choice.py`` names the one a
job trains on, in the process that launches it, before anything is written.

All answer the same questions (``world``, ``check_jit_compile``, ``distribute_models``,
``rank_seed``, ``distributed_optimizer``, ``broadcast_model``,
``restore_latest``, ``average_variables``, ``metric_averaging``,
``exact_test_slice``, ``ramps_lr_in_schedule``, ``lr_callbacks``, the object
collectives, ``peer_failure``: one line when another process died); docs/engines.md compares them.

What differs by engine and is needed before one starts (in the launching
process, by the launchers and the config's checks) is each engine's
``facts`` (``cifar_dist/common/engine_facts.py``: the list of the engines,
each one's properties), which imports none of them; callers ask a property
(``facts.multi_process``), never compare the engine's name.

``start_engine`` is the one entry: it imports the engine's module only when
that engine is used (a Horovod run imports nothing of another engine), with
Python's garbage collector paused (``common/garbage_collector.py``).
"""

from __future__ import annotations

from cifar_dist.common.engine_facts import ENGINES, HOROVOD, JAX, TENSORFLOW
from cifar_dist.common.garbage_collector import framework_imports


def start_engine(name: str, trainer_cfg):
    """Start the named engine in this process (once, before any model is built) and return it.

    The engine imports its framework here, with the collector paused; in the command's own process what is alive
    then is collected once and frozen, so that no later collection walks the framework's objects again; never in a
    library call (``framework_imports``; the command hands them back to the collector as it ends)."""
    with framework_imports():
        return _started(name, trainer_cfg)


def _started(name: str, trainer_cfg):
    if name == HOROVOD.name:
        from cifar_dist.training.engines.horovod import HorovodEngine  # lazy: only the engine this run uses

        return HorovodEngine.start(trainer_cfg)
    if name == JAX.name:
        from cifar_dist.training.engines.jax import JaxEngine  # lazy: only the engine this run uses

        return JaxEngine.start(trainer_cfg)
    if name == TENSORFLOW.name:
        from cifar_dist.training.engines.tensorflow import TensorflowEngine  # lazy: only the engine this run uses

        return TensorflowEngine.start(trainer_cfg)
    raise ValueError(f"engine={name!r}: cifar_dist has the engines {', '.join(ENGINES)}")
