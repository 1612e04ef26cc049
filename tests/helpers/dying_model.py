"""A user's model module whose rank 1 dies by SIGKILL 1 s into epoch 2 (a kill -9, a lost node): the peer's-death
tests of the JAX engine (test_engine_jax.py) and of engine=tensorflow over MPI (test_engine_tensorflow.py)."""

import textwrap

_TEMPLATE = textwrap.dedent("""
    import os
    import signal
    import threading
    import time
    from pathlib import Path

    {import_line}


    def _die_in_the_second_epoch(marker):
        while not marker.is_file():
            time.sleep(0.1)
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)  # a peer's death, as a kill -9 or a lost node


    def build(num_classes):
        if os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
            marker = Path("run") / "checkpoints" / "checkpoint-001.{suffix}"
            threading.Thread(target=_die_in_the_second_epoch, args=(marker,), daemon=True).start()
        inputs = {keras}.Input(shape=(32, 32, 3))
        x = {keras}.layers.Flatten()(inputs)
        return {keras}.Model(inputs, {keras}.layers.Dense(num_classes, activation="softmax")(x))
""")

# Keras 3 (``import keras``: .keras checkpoints) and Keras 2 (``tf.keras``: .h5 checkpoints)
KERAS3 = _TEMPLATE.format(import_line="import keras", keras="keras", suffix="keras")
KERAS2 = _TEMPLATE.format(import_line="import tensorflow as tf", keras="tf.keras", suffix="h5")
