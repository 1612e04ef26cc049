"""tf.data input pipelines: per-rank sharding, seeded shuffling, batched augmentation.

Every random choice (the epoch's permutation, each batch's shifts and flips)
is drawn with *stateless* random ops from (seed, epoch, step, rank), so the
stream of batches is a pure function of the config: a run resumed at epoch k
sees exactly the batches an uninterrupted run would have seen from epoch k on.

All ranks get the same number of full batches per epoch (the remainder is
dropped) and the same number of validation batches: a rank that runs one
collective fewer than the others deadlocks the job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from cifar_dist.data.sampling import EPOCH_STRIDE as _EPOCH_STRIDE
from cifar_dist.data.sampling import checked_steps, eval_indices, steps_per_epoch  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class TrainStream:
    dataset: tf.data.Dataset
    steps_per_epoch: int
    images_per_rank_epoch: int


@dataclass(frozen=True)
class EvalStream:
    dataset: tf.data.Dataset
    steps: int
    samples: int


def to_float(images: tf.Tensor) -> tf.Tensor:
    """uint8 pixels to float32 in [0, 1], as the seed did (x /= 255); float images (a factory's arrays) as they are."""
    if images.dtype == tf.uint8:
        return tf.cast(images, tf.float32) / 255.0
    return tf.cast(images, tf.float32)


def host_rows(x: np.ndarray, index: tf.Tensor) -> tf.Tensor:
    """``x[index]``, gathered by numpy from the array where it lies: the images are never copied into TensorFlow
    whole (``tf.constant`` of the set holds a copy and, while making it, a second one: 3x the set in memory)."""
    rows = tf.numpy_function(lambda i: x[i], [index], tf.as_dtype(x.dtype), stateful=False)
    return tf.ensure_shape(rows, [None, *x.shape[1:]])


def augment_batch(images: tf.Tensor, seed: tf.Tensor, width_shift: float, height_shift: float, flip: bool) -> tf.Tensor:
    """The seed's ImageDataGenerator(width_shift_range, height_shift_range,
    horizontal_flip, fill_mode="nearest") on a whole float batch at once.

    Shifts are uniform in [-range, range] x size, bilinear, nearest fill (the
    generator's spline order 1 and fill mode); the same kernel Keras'
    RandomTranslation uses, but with stateless seeds.
    """
    shape = tf.shape(images)
    batch, height, width = shape[0], shape[1], shape[2]
    seeds = tf.random.experimental.stateless_split(seed, num=3)
    if flip:
        do_flip = tf.random.stateless_uniform([batch], seeds[0]) < 0.5
        images = tf.where(do_flip[:, None, None, None], tf.reverse(images, axis=[2]), images)
    if width_shift or height_shift:
        dx = tf.random.stateless_uniform([batch], seeds[1], -width_shift, width_shift) * tf.cast(width, tf.float32)
        dy = tf.random.stateless_uniform([batch], seeds[2], -height_shift, height_shift) * tf.cast(height, tf.float32)
        ones, zeros = tf.ones([batch]), tf.zeros([batch])
        # Output pixel (x, y) samples input (x - dx, y - dy).
        transforms = tf.stack([ones, zeros, -dx, zeros, ones, -dy, zeros, zeros], axis=1)
        images = tf.raw_ops.ImageProjectiveTransformV3(
            images=images,
            transforms=transforms,
            output_shape=tf.stack([height, width]),
            fill_value=tf.constant(0.0),
            interpolation="BILINEAR",
            fill_mode="NEAREST",
        )
    return images


def translate_batch(images: tf.Tensor, seed: tf.Tensor, pixels: int) -> tf.Tensor:
    """Shift each image by whole pixels, uniform in [-pixels, pixels] each way, reflecting at the borders
    (airbench's pad-and-crop, done as one batched transform)."""
    batch = tf.shape(images)[0]
    seeds = tf.random.experimental.stateless_split(seed, num=2)
    dx = tf.cast(tf.random.stateless_uniform([batch], seeds[0], -pixels, pixels + 1, dtype=tf.int32), tf.float32)
    dy = tf.cast(tf.random.stateless_uniform([batch], seeds[1], -pixels, pixels + 1, dtype=tf.int32), tf.float32)
    ones, zeros = tf.ones([batch]), tf.zeros([batch])
    transforms = tf.stack([ones, zeros, -dx, zeros, ones, -dy, zeros, zeros], axis=1)
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=images,
        transforms=transforms,
        output_shape=tf.shape(images)[1:3],
        fill_value=tf.constant(0.0),
        interpolation="NEAREST",
        fill_mode="REFLECT",
    )


def cutout_batch(images: tf.Tensor, seed: tf.Tensor, size: int) -> tf.Tensor:
    """Zero one size x size square per image, its centre uniform over the image (clipped at the borders)."""
    shape = tf.shape(images)
    batch, height, width = shape[0], shape[1], shape[2]
    seeds = tf.random.experimental.stateless_split(seed, num=2)
    cy = tf.random.stateless_uniform([batch, 1, 1], seeds[0], 0, height, dtype=tf.int32)
    cx = tf.random.stateless_uniform([batch, 1, 1], seeds[1], 0, width, dtype=tf.int32)
    ys, xs = tf.range(height)[None, :, None], tf.range(width)[None, None, :]
    inside = (
        (ys >= cy - size // 2) & (ys < cy - size // 2 + size) & (xs >= cx - size // 2) & (xs < cx - size // 2 + size)
    )
    return images * tf.cast(~inside, images.dtype)[..., None]


def alternating_flip(images: tf.Tensor, image_bits: tf.Tensor, epoch: tf.Tensor) -> tf.Tensor:
    """airbench's alternating flip: image i is mirrored in the epochs whose parity equals its fixed random bit,
    so over any two consecutive epochs every image is seen both ways."""
    flip = tf.not_equal(image_bits, tf.equal(epoch % 2, 1))
    return tf.where(flip[:, None, None, None], tf.reverse(images, axis=[2]), images)


def augment_batch_all(batch, index, epoch, batch_seed, augment_cfg, image_bits):
    """Every configured augmentation of one batch; the seed's options draw exactly what they always drew."""
    alternating = augment_cfg.horizontal_flip and augment_cfg.alternating_flip
    batch = augment_batch(
        batch,
        batch_seed,
        augment_cfg.width_shift,
        augment_cfg.height_shift,
        augment_cfg.horizontal_flip and not alternating,
    )
    extra = tf.random.experimental.stateless_split(tf.random.experimental.stateless_fold_in(batch_seed, 1), num=2)
    if alternating:
        batch = alternating_flip(batch, tf.gather(image_bits, index), epoch)
    if augment_cfg.translate:
        batch = translate_batch(batch, extra[0], augment_cfg.translate)
    if augment_cfg.cutout:
        batch = cutout_batch(batch, extra[1], augment_cfg.cutout)
    return batch


def _prefetch(value: int) -> int:
    return tf.data.AUTOTUNE if value < 0 else value


def without_model_thread(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``dataset`` without tf.data's autotuning model thread: same elements, same order.

    That thread re-plans the pipeline at a period that doubles up to 60 s, and
    (TF 2.18) an iterator's destructor waits for its next wake-up: Keras' fit
    stalled 0-60 s as it returned (16-54 s measured with 2 ranks; see
    docs/benchmarks-history.md). Without it, AUTOTUNE parallelism is the runner thread
    pool's size and prefetch grows its buffer by the legacy autotuner; the
    pipeline still feeds the model many times faster than it trains."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def train_stream(
    x: np.ndarray,
    y: np.ndarray,
    *,
    batch_size: int,
    rank: int,
    size: int,
    shard: bool,
    seed: int,
    initial_epoch: int,
    epochs: int,
    augment,
    num_classes: int = 10,
    prefetch: int = -1,
) -> TrainStream:
    """Batches for epochs [initial_epoch, epochs) of this rank, as one dataset.

    shard=True: every rank draws the same permutation and takes a disjoint
    1/size slice of it (each image seen once per epoch by the whole job).
    shard=False (the seed's policy): every rank walks the whole set in its own
    order.
    """
    n = int(x.shape[0])
    per_rank = n // size if shard else n
    steps = checked_steps(n, batch_size, size, shard)
    used = steps * batch_size
    labels = tf.constant(y, tf.int32)
    seed_t = tf.constant(seed, tf.int64)
    # One fixed bit per image for alternating flips, from the seed alone (the same on every rank).
    image_bits = tf.random.stateless_uniform([n], tf.stack([seed_t ^ 0xF11F, tf.constant(0, tf.int64)])) < 0.5

    def epoch_batches(epoch):
        stream = epoch * _EPOCH_STRIDE + (0 if shard else rank)
        order = tf.argsort(tf.random.stateless_uniform([n], tf.stack([seed_t, stream])))
        if shard:
            order = tf.reshape(order[: per_rank * size], [per_rank, size])[:, rank]
        index_batches = tf.reshape(order[:used], [steps, batch_size])
        steps_ds = tf.data.Dataset.range(steps)
        return tf.data.Dataset.zip(
            (
                tf.data.Dataset.from_tensors(epoch).repeat(steps),
                steps_ds,
                tf.data.Dataset.from_tensor_slices(index_batches),
            )
        )

    def load(epoch, step, index):
        batch = to_float(host_rows(x, index))
        if augment.enabled:
            batch_seed = tf.stack([seed_t ^ 0x5EED, (epoch * _EPOCH_STRIDE + rank) * 1_000_000 + step])
            batch = augment_batch_all(batch, index, epoch, batch_seed, augment, image_bits)
        batch = tf.ensure_shape(batch, [batch_size, *x.shape[1:]])
        return batch, tf.one_hot(tf.gather(labels, index), num_classes)

    ds = (
        tf.data.Dataset.range(initial_epoch, epochs)
        .flat_map(epoch_batches)
        .map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(_prefetch(prefetch))
    )
    return TrainStream(without_model_thread(ds), steps, used)


def eval_stream(
    x: np.ndarray,
    y: np.ndarray,
    *,
    batch_size: int,
    rank: int,
    size: int,
    equal_shards: bool,
    num_classes: int = 10,
) -> EvalStream:
    """This rank's slice of an evaluation set, in order, no augmentation.

    equal_shards=True (validation during fit): every rank gets n // size
    images and the same number of batches, so the per-epoch metric average
    across ranks is a plain mean. False (the final test): rank r takes images
    r, r + size, ... so together the ranks cover every image exactly once;
    the trainer reduces sums, not means.
    """
    idx = eval_indices(int(x.shape[0]), rank, size, equal_shards)
    xs, ys = x[idx], tf.constant(y[idx], tf.int32)  # xs: a view of the set
    steps = max(1, math.ceil(len(ys) / batch_size)) if len(ys) else 0
    ds = (
        tf.data.Dataset.range(len(ys))
        .batch(batch_size)
        .map(
            lambda index: (to_float(host_rows(xs, index)), tf.one_hot(tf.gather(ys, index), num_classes)),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .prefetch(tf.data.AUTOTUNE)
    )
    return EvalStream(without_model_thread(ds), steps, len(ys))
