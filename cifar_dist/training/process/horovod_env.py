"""Horovod and TensorFlow process set-up: one call, before any model is built.

Follows Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py: init
Horovod (``join_horovod``); the engine then pins one GPU per local rank with
memory growth and sizes the CPU thread pools for this rank (both in
tf_devices.py, which the TensorFlow engine uses too).

TensorFlow and Horovod are imported inside the functions, in this order:
TensorFlow reads the CPU-kernel choice (``use_onednn``) once, when it loads,
and Horovod's Keras layer is bound to tf.keras only where tf.keras is Keras 2
(Keras 3 models do not use that layer: training/engines/horovod.py).
"""

from __future__ import annotations

import contextlib
import importlib
import sys

from cifar_dist.common.optional_imports import hidden
from cifar_dist.training.process.hardware import use_onednn
from cifar_dist.training.process.mpi_groups import join_sweep_group
from cifar_dist.training.process.tf_console import filtered_native_stderr


def keras_backing_tf_keras() -> tuple:
    """(package name, version) of the Keras that ``tf.keras`` resolves to."""
    import tensorflow as tf  # lazy: TensorFlow

    root = tf.keras.__name__.split(".")[0]
    version = getattr(importlib.import_module(root), "__version__", "unknown")
    return root, version


def tf_keras_is_keras2() -> bool:
    """Whether ``tf.keras`` is Keras 2 (tf-keras), the Keras Horovod's Keras layer serves."""
    return str(keras_backing_tf_keras()[1]).startswith("2.")


def bind_horovod_to_tf_keras() -> None:
    """Point Horovod's Keras layer at tf.keras's backend.

    horovod.tensorflow.keras (0.28.1) does ``from keras import backend as K``
    and hands that K to its callbacks. With TensorFlow >= 2.16 the ``keras``
    package is Keras 3 while tf.keras is tf-keras (Keras 2), so
    MetricAverageCallback, the lr warmup/schedule callbacks and
    hvd.broadcast_global_variables would call a backend that lacks
    ``constant``/``get_value``/``set_value`` (AttributeError at the first
    epoch end). Horovod's Keras layer is therefore imported while ``keras``
    means tf.keras (``horovod_sees_tf_keras``): Keras 3, which nothing here
    uses, is never loaded (it costs ~1.5 s per rank and pulls in scikit-learn
    and matplotlib). Horovod reads ``K`` when a callback is constructed; the
    module globals are re-bound in case Horovod's layer was loaded earlier
    elsewhere. A no-op where ``keras`` already is Keras 2 (TF <= 2.15).
    """
    import tensorflow as tf  # lazy: TensorFlow

    with horovod_sees_tf_keras(tf.keras):
        import horovod.tensorflow.keras as hvd_keras  # lazy: Horovod
        import horovod.tensorflow.keras.callbacks as hvd_callbacks  # lazy: Horovod

    for module in (hvd_keras, hvd_callbacks):
        if getattr(module, "K", None) is not tf.keras.backend:
            module.K = tf.keras.backend


# What TensorFlow imports, when installed, for what a training process never does: JAX for TensorFlow Lite's
# converter (tensorflow/lite/python/util.py: ~1.4 s more per rank, and JAX's own threads in every Horovod run; JAX is
# engine=jax's alone: tests/project/test_lazy_imports.py), pandas for tf-keras' data adapter (fit's DataFrames;
# cifar_dist feeds tf.data: ~0.3-0.9 s).
TENSORFLOW_OPTIONAL_IMPORTS = ("jax", "pandas")


def tensorflow_for_training():
    """While TensorFlow loads, JAX and pandas look missing to it, unless loaded already (``optional_imports``)."""
    return hidden(*TENSORFLOW_OPTIONAL_IMPORTS) if "tensorflow" not in sys.modules else contextlib.nullcontext()


@contextlib.contextmanager
def horovod_sees_tf_keras(tf_keras_module):
    """While it lasts, ``import keras`` gives ``tf_keras_module`` unless a ``keras`` is loaded already.

    Only for the duration of Horovod's import: afterwards ``import keras`` is
    the installed package again."""
    if "keras" in sys.modules:
        yield
        return
    sys.modules["keras"] = tf_keras_module
    try:
        yield
    finally:
        if sys.modules.get("keras") is tf_keras_module:
            del sys.modules["keras"]


def join_horovod(onednn: bool = True) -> tuple:
    """CPU kernels, TensorFlow, Horovod's Keras layer where tf.keras is Keras 2, then ``hvd.init()``; returns
    (``horovod.tensorflow``, how many processes share this host's cores). The engine (training/engines/horovod.py)
    then pins the GPU and sizes the thread pools (``tf_devices.use_gpu_and_threads``) and says who this rank is.

    Inside a concurrent sweep (``launcher.concurrent=k``, see
    training/process/mpi_groups.py) Horovod's world is this rank's MPI group, not the
    whole mpirun: ``hvd.init(comm=<group communicator>)``; the other groups' ranks on this host share its cores.
    """
    use_onednn(onednn)  # must precede TensorFlow's import (the check below imports it)
    with filtered_native_stderr(), tensorflow_for_training():  # CUDA start-up noise on CPU machines; no JAX here
        if tf_keras_is_keras2():  # (TF_USE_LEGACY_KERAS=0: tf.keras is Keras 3, trained as Keras 3 models are)
            bind_horovod_to_tf_keras()
    # Only now: TensorFlow loads with the CPU kernels chosen above, and tf.keras is known to be Keras 2.
    import horovod.tensorflow as hvd  # lazy: Horovod

    group = join_sweep_group()
    if group is None:
        hvd.init()
    else:
        hvd.init(comm=group.comm)
    return hvd, group.host_ranks if group is not None else hvd.local_size()
