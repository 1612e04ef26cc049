"""Benchmark: the input pipelines alone, no model — how fast can each feed training?

- ``seed_flow``: the seed's ``ImageDataGenerator(...).flow(x, y, batch_size=32)``
  iterated in the main thread (one Python thread of numpy/scipy per image);
- ``seed_flow_4_workers``: the same through Keras' ``OrderedEnqueuer`` with 4
  threads, which is what ``fit_generator(..., workers=4)`` consumes;
- ``cifar_dist``: ``train_stream`` (gather, cast, batched stateless shifts and
  flips, prefetch) with the thread pools one rank of cifar_dist gets.

Each is warmed up for a few batches, then timed over ``--batches`` batches.

    python -m benchmarks pipeline --data sample --batches 300 --metrics out.json
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

WARMUP_BATCHES = 5


def seed_datagen():
    """The seed's generator, argument for argument (the ones left at their defaults omitted)."""
    import tensorflow as tf

    return tf.keras.preprocessing.image.ImageDataGenerator(
        width_shift_range=0.1,
        height_shift_range=0.1,
        fill_mode="nearest",
        horizontal_flip=True,
    )


def rate(batches, count: int, batch_size: int) -> float:
    """Images/s over ``count`` batches of the iterator ``batches`` after a short warm-up."""
    for _ in range(WARMUP_BATCHES):
        next(batches)
    start = time.perf_counter()
    for _ in range(count):
        next(batches)
    return count * batch_size / (time.perf_counter() - start)


def seed_flow_rate(x, y, batch_size: int, count: int, workers: int) -> float:
    import tensorflow as tf

    flow = seed_datagen().flow(x.astype("float32") / 255, y, batch_size=batch_size)
    if workers <= 1:
        return rate(iter(flow), count, batch_size)
    enqueuer = tf.keras.utils.OrderedEnqueuer(flow, use_multiprocessing=False, shuffle=True)
    enqueuer.start(workers=workers, max_queue_size=10)
    try:
        return rate(enqueuer.get(), count, batch_size)
    finally:
        enqueuer.stop()


def cifar_dist_rate(x, y, batch_size: int, count: int) -> float:
    from omegaconf import OmegaConf

    from cifar_dist.config.schema import AugmentConfig
    from cifar_dist.data.pipeline import train_stream

    steps = len(x) // batch_size
    epochs = -(-(count + WARMUP_BATCHES) // steps)
    stream = train_stream(
        x,
        y.reshape(-1),
        batch_size=batch_size,
        rank=0,
        size=1,
        shard=False,
        seed=42,
        initial_epoch=0,
        epochs=epochs,
        augment=OmegaConf.structured(AugmentConfig()),
    )
    return rate(iter(stream.dataset), count, batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="sample")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--metrics", required=True)
    args = parser.parse_args()

    import tensorflow as tf
    from bench_common import load_arrays, write_result

    from cifar_dist.training.process.threads import plan_threads

    # One rank's thread pools, as cifar_dist's trainer sets them.
    plan = plan_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(plan.intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(plan.inter_op)

    (x, y), _ = load_arrays(args.data)
    images_per_sec = {
        "seed_flow": seed_flow_rate(x, y, args.batch_size, args.batches, workers=1),
        "seed_flow_4_workers": seed_flow_rate(x, y, args.batch_size, args.batches, workers=4),
        "cifar_dist": cifar_dist_rate(x, y, args.batch_size, args.batches),
    }
    write_result(
        args.metrics,
        variant="pipeline",
        batch_size=args.batch_size,
        batches=args.batches,
        images_per_sec=images_per_sec,
    )


if __name__ == "__main__":
    main()
