"""Benchmark variant "bare Keras": the seed CNN with ``model.fit`` on in-memory float arrays.

No augmentation, no Horovod, no callbacks besides a clock, TensorFlow's
default threads: the framework-overhead floor the other variants are compared
with. Same model (``cifar_dist.models.seed_cnn``), same optimizer (legacy
RMSprop lr 1e-4, decay 1e-6), same batch (32) as the seed reference.

    python benchmarks/bench_bare_keras.py --data sample --epochs 5 --metrics out.json
"""

from __future__ import annotations

import argparse
import os
import time

PROCESS_START = time.time()
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="sample", help="'sample' (packaged) or a CIFAR-10 path")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--metrics", required=True, help="JSON file to write")
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="XLA-compile the train step (what trainer.jit_compile would buy without Horovod)",
    )
    args = parser.parse_args()

    import tensorflow as tf
    from bench_common import EpochClock, load_arrays, peak_rss_mb, write_result  # the seed reference's clock and loader

    from cifar_dist.models.seed_cnn import build

    (x_train, y_train), (x_test, y_test) = load_arrays(args.data)
    x_train = x_train.astype("float32") / 255
    x_test = x_test.astype("float32") / 255
    y_train = tf.keras.utils.to_categorical(y_train, 10)
    y_test = tf.keras.utils.to_categorical(y_test, 10)

    model = build()
    model.compile(
        loss="categorical_crossentropy",
        optimizer=tf.keras.optimizers.legacy.RMSprop(learning_rate=1e-4, decay=1e-6),
        metrics=["accuracy"],
        jit_compile=args.jit_compile,
    )
    clock = EpochClock(len(x_train), PROCESS_START)
    model.fit(
        x_train,
        y_train,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(x_test, y_test),
        shuffle=True,
        callbacks=[clock],
        verbose=0,
    )
    loss, acc = model.evaluate(x_test, y_test, verbose=0)
    write_result(
        args.metrics,
        variant="bare_keras_jit" if args.jit_compile else "bare_keras",
        ranks=1,
        batch_size=args.batch_size,
        train_images=int(len(x_train)),
        epochs=clock.epochs,
        test={"loss": float(loss), "accuracy": float(acc)},
        wall_time_s=time.time() - PROCESS_START,
        peak_rss_mb_per_rank=[peak_rss_mb()],
    )


if __name__ == "__main__":
    main()
