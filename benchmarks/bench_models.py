"""Models the benchmarks train that are not cifar_dist's options (``benchmarks/bench_conf/model/``)."""

from __future__ import annotations


def tiny_dense(num_classes: int):
    """Flatten + Dense softmax: 30,730 parameters, a step that is almost all framework overhead."""
    import keras  # Keras 3, on the engine's backend

    return keras.Sequential(
        [keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(num_classes, activation="softmax")]
    )
