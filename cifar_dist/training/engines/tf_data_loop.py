"""The input and the loop of the engines that train on TensorFlow (horovod, tensorflow): tf.data and Keras' fit.

Each rank's batches come from a tf.data pipeline (``data/streams.py``: seeded
per-epoch permutation, augmentation on the host's threads, prefetch) and
``model.fit``/``model.evaluate`` run them, as in Horovod's Keras examples. The
JAX engine answers the same four calls with the data on the device
(``jax.py``, ``jax_data.py``, ``jax_fit.py``).
"""

from __future__ import annotations

from cifar_dist.training.engines.engine import Engine


class TfDataLoop(Engine):
    """An engine's ``train_input``, ``eval_input``, ``fit`` and ``evaluate`` on tf.data and Keras' own loop (Keras
    compiles as it goes: no ``timings`` to record)."""

    def device_peak_mb(self):
        """None: TensorFlow's GPU memory is not recorded (its allocator grows as needed: ``tf_devices.py``)."""
        return None

    def train_input(self, data, *, placement="auto", **stream):
        """This rank's training stream (``streams.train_input``; ``data.placement`` is engine=jax's)."""
        from cifar_dist.data.streams import train_input  # lazy: TensorFlow

        return train_input(data, **stream)

    def eval_input(self, data, *, batch_size, rank, size, equal_shards):
        """This rank's part of the test split (``streams.eval_input``)."""
        from cifar_dist.data.streams import eval_input  # lazy: TensorFlow

        return eval_input(data, batch_size=batch_size, rank=rank, size=size, equal_shards=equal_shards)

    def fit(self, model, train, validation, *, epochs, initial_epoch, validation_freq, callbacks, verbose, **_):
        """Keras' ``fit`` over the two streams (a streamed batch with a NaN image or a label out of range: one line,
        ``streams.checked_batch``)."""
        from cifar_dist.data.streams import bad_input_in_one_line  # lazy: TensorFlow

        with bad_input_in_one_line():
            return model.fit(
                train.dataset,
                epochs=epochs,
                initial_epoch=initial_epoch,
                steps_per_epoch=train.steps_per_epoch,
                validation_data=validation.dataset,
                validation_steps=validation.steps,
                validation_freq=validation_freq,
                callbacks=callbacks,
                shuffle=False,  # the stream is shuffled already (data/pipeline.py); Keras 3 warns otherwise
                verbose=verbose,
            )

    def evaluate(self, model, stream, outputs=("",)) -> dict:
        """``model.evaluate(..., return_dict=True)`` of ``stream``, its labels given once per output."""
        from cifar_dist.data.streams import bad_input_in_one_line  # lazy: TensorFlow

        dataset = stream.dataset
        if len(outputs) > 1:  # Keras 2 took one label tensor for all outputs; Keras 3 wants the outputs' structure
            names = [o.rstrip("_") for o in outputs]
            dataset = dataset.map(lambda images, labels: (images, {name: labels for name in names}))
        with bad_input_in_one_line():
            return model.evaluate(dataset, steps=stream.steps, verbose=0, return_dict=True)
