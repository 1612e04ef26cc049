"""engine=tensorflow's gradients averaged over MPI inside the training step, for Keras 2 and Keras 3 optimizers.

The step Keras compiles (``model.fit``'s ``tf.function``) computes every
gradient; ``mean_over_peers`` then concatenates them into one flat buffer
per dtype (one fused buffer a step: the seed CNN's 1.2 M floats, 4.7 MB)
and one ``tf.numpy_function`` hands it to ``MPI_Allreduce`` (mpi4py;
Open MPI's shared memory between the processes of one host, its TCP or
fabric between hosts) and splits the mean back into the gradients' shapes.
TensorFlow's kernels compute everything else, in every process.

The optimizer is made to apply that mean, the way Horovod's
``DistributedOptimizer`` is for Keras 2 and ``horovod.py``'s subclass is for
Keras 3: the instance's class becomes a subclass of its own class, named and
placed like it (so it saves and loads as the optimizer it was), whose
gradient step averages first:

- Keras 2 (tf-keras): ``_compute_gradients`` (legacy optimizers) and
  ``compute_gradients`` (the others), which ``minimize`` (``fit``'s step)
  calls, and through which a loss-scale optimizer's finiteness check sees
  the averaged gradients (as Horovod's Keras 2 wrapper averages there too);
- Keras 3: ``apply``, which ``fit``'s ``train_step``, a custom
  ``train_step`` and ``apply_gradients`` all end in.

``trainer.compression=fp16`` sends the buffer as float16 (half the bytes, its
sum in float16, as Horovod's fp16 compression does) and divides in float32.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np

from cifar_dist.common.keras_flavor import KERAS2, flavor_of


def mean_over_peers(tensors: Sequence, peers, compression: str = "none") -> List:
    """Each of ``tensors`` (gradients: dense or IndexedSlices, None kept) replaced by its mean over ``peers``: one
    MPI allreduce per dtype, inside the graph being traced."""
    import tensorflow as tf  # lazy: TensorFlow (the engine's start loaded it)

    present = [i for i, t in enumerate(tensors) if t is not None]
    dense = [tf.convert_to_tensor(tensors[i]) for i in present]
    averaged: List[Optional[object]] = list(tensors)
    for dtype in dict.fromkeys(t.dtype for t in dense):
        members = [k for k, t in enumerate(dense) if t.dtype == dtype]
        flat = tf.concat([tf.reshape(dense[k], [-1]) for k in members], axis=0)
        wire = tf.float16 if compression == "fp16" and dtype.is_floating and dtype != tf.float16 else dtype
        summed = tf.numpy_function(
            _summed_by(peers), [tf.cast(flat, wire)], wire, stateful=True, name="mpi_allreduce_gradients"
        )
        mean = tf.cast(summed, dtype) / tf.cast(peers.size, dtype)
        parts = tf.split(tf.reshape(mean, [-1]), [tf.size(dense[k]) for k in members], num=len(members))
        for k, part in zip(members, parts):
            value = tf.reshape(part, tf.shape(dense[k]))
            value.set_shape(dense[k].shape)
            averaged[present[k]] = value
    return averaged


def _summed_by(peers) -> Callable[[np.ndarray], np.ndarray]:
    """The function ``tf.numpy_function`` calls with the flat buffer: its sum over ``peers``, in a new array
    (TensorFlow may share the argument's memory with the tensor)."""

    def summed(flat: np.ndarray) -> np.ndarray:
        out = np.array(flat, copy=True, order="C").reshape(-1)
        peers.sum_in_place(out)
        return out

    return summed


def averaging_optimizer(optimizer, peers, compression: str = "none"):
    """``optimizer`` (Keras 2 or 3, as the trainer hands it over), its gradients averaged over ``peers`` before
    every update; the same object, its class now the averaging subclass of its own."""
    base = type(optimizer)

    def average(grads):
        return mean_over_peers(list(grads), peers, compression)

    members = _keras2_members(base, average) if flavor_of(optimizer) == KERAS2 else _keras3_members(base, average)
    members.update({"__module__": base.__module__, "__qualname__": base.__qualname__})
    optimizer.__class__ = type(base.__name__, (base,), members)
    return optimizer


def _keras3_members(base, average) -> dict:
    def apply(self, grads, trainable_variables=None):
        return base.apply(self, average(grads), trainable_variables)

    return {"apply": apply}


def _keras2_members(base, average) -> dict:
    def averaged(pairs):
        pairs = list(pairs)
        grads = average([g for g, _ in pairs])
        return list(zip(grads, [v for _, v in pairs]))

    members = {}
    if hasattr(base, "_compute_gradients"):  # legacy optimizers (what cifar_dist's factories build)

        def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
            return averaged(base._compute_gradients(self, loss, var_list, grad_loss=grad_loss, tape=tape))

        members["_compute_gradients"] = _compute_gradients
    if hasattr(base, "compute_gradients"):  # tf-keras' newer optimizers

        def compute_gradients(self, loss, var_list, tape=None):
            return averaged(base.compute_gradients(self, loss, var_list, tape=tape))

        members["compute_gradients"] = compute_gradients
    return members
