"""Engines: what makes N processes one data-parallel training job.

The trainer and the evaluation talk to an engine, never to Horovod or JAX
directly. What an engine is, every question they ask of it, is one class:
``engine.py``'s ``Engine`` (this process's place in the job, ``world``; the
checks before the model is built; the collectives of small Python objects;
the optimizer that averages gradients, the copy of rank 0's model, averaged
variables and epoch metrics; the input and the loop). One module per engine,
each a subclass of it:

* ``horovod.py``: Horovod 0.28 over MPI or Gloo, for Keras 2 (tf.keras, through
  Horovod's own Keras layer) and Keras 3 on TensorFlow (Horovod's TF ops);
* ``jax.py``: Keras 3 on JAX, its processes joined by ``jax.distributed`` and
  the model made one over all of them by Keras' ``DataParallel``; no Horovod
  (its input and loop: ``jax_data.py``, ``jax_fit.py``, ``jax_augment.py``;
  its GPUs: ``jax_devices.py``);
* ``tensorflow.py``: one process on TensorFlow alone, Keras 2 or 3; every
  collective is the identity (what a one-process job trains on without Horovod).

Horovod's and TensorFlow's input and loop are tf.data and Keras' ``fit``
(``tf_data_loop.py``); Horovod's epoch metrics of Keras 3 models are averaged
by ``epoch_metrics.py``. docs/engines.md compares the engines.

``engine=auto`` (the default) is none of them: ``choice.py`` names the one a
job trains on, in the process that launches it, before anything is written.

What differs by engine and is needed before one starts (in the launching
process, by the launchers and the config's checks) is each engine's
``facts`` (``cifar_dist/common/engine_facts.py``: the list of the engines,
each one's properties and the class that runs it), which imports none of them;
callers ask a property (``facts.multi_process``), never compare the engine's name.

The folders import one way: this one imports ``training/process/`` (what sets a
process up: Horovod's start, TensorFlow's devices, threads, kernels), never
the other way, and nothing of ``training/`` above it (the trainer imports it).

``start_engine`` is the one entry: it imports the engine's module only when
that engine is used (a Horovod run imports nothing of another engine), with
Python's garbage collector paused (``common/garbage_collector.py``).
"""

from __future__ import annotations

import importlib

from cifar_dist.common.engine_facts import ENGINES, engine_facts
from cifar_dist.common.garbage_collector import framework_imports


def start_engine(name: str, trainer_cfg):
    """Start the named engine in this process (once, before any model is built) and return it (an ``Engine``).

    The engine imports its framework here, with the collector paused; in the command's own process what is alive
    then is collected once and frozen, so that no later collection walks the framework's objects again; never in a
    library call (``framework_imports``; the command hands them back to the collector as it ends)."""
    with framework_imports():
        return engine_class(name).start(trainer_cfg)


def engine_class(name: str):
    """The class of engine ``name`` (its facts' ``engine_class``), its module imported now: only the engine this run
    uses is ever imported."""
    facts = engine_facts(name)
    if facts is None:
        raise ValueError(f"engine={name!r}: cifar_dist has the engines {', '.join(ENGINES)}")
    module, _, cls = facts.engine_class.rpartition(".")
    return getattr(importlib.import_module(module), cls)
