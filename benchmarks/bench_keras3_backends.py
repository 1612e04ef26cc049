"""Where engine=jax's time goes on a CPU: the seed CNN's train step in bare Keras 3 on each backend.

One process, no cifar_dist trainer, no Horovod, no data pipeline: ``fit`` on
in-memory float arrays (batch 32, the seed's RMSprop), timed over the epochs
after the first (tracing). Run once per backend, in one sitting, to separate
the backends' kernels from the engines' own costs:

* ``tensorflow``: Keras 3 on TensorFlow's kernels (oneDNN), what engine=horovod runs a Keras 3 model on;
* ``tensorflow --jit-compile``: the same step compiled by XLA (TensorFlow's XLA CPU backend);
* ``jax``: the same step as JAX compiles it (XLA's CPU backend), what engine=jax runs.

    python -m benchmarks keras3-backends --backend jax --epochs 3
    python -m benchmarks keras3-backends --backend tensorflow --jit-compile --epochs 3

Prints one JSON line: backend, jit, images/s of each timed epoch and their median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("tensorflow", "jax"), required=True)
    parser.add_argument("--jit-compile", action="store_true", help="XLA-compile the step (JAX always does)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs over the packaged sample (the first untimed)")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = args.backend  # before Keras loads
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import keras
    from bench_common import load_arrays  # the benchmarks' one loader of the sample

    from cifar_dist.models.seed_cnn import build

    (x, y), _ = load_arrays("sample")
    x = x.astype("float32") / 255
    y = keras.utils.to_categorical(y, 10)
    keras.utils.set_random_seed(0)
    model = build(keras=keras)
    model.compile(
        loss="categorical_crossentropy",
        optimizer=keras.optimizers.RMSprop(learning_rate=1e-4),
        metrics=["accuracy"],
        jit_compile=True if args.backend == "jax" else args.jit_compile,
    )
    rates = []

    class Clock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            rates.append(len(x) / (time.perf_counter() - self.start))

    model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, shuffle=True, callbacks=[Clock()], verbose=0)
    timed = rates[1:] or rates
    print(
        json.dumps(
            {
                "backend": args.backend,
                "jit_compile": args.backend == "jax" or args.jit_compile,
                "images_per_sec": [round(r, 1) for r in timed],
                "median": round(statistics.median(timed), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
