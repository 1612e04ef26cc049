"""Data sets given as tf.data pipelines (``data=folder``, ``data=custom``): the return type and the per-rank streams.

The per-rank contract of a data factory (``data=custom data._target_=mydata.make``):

- ``make(seed: int, **data.kwargs) -> DataStreams`` is called once on every
  rank with the same ``seed`` (``trainer.seed``) and must return the same
  elements in the same order on every rank: cifar_dist shards by position.
- ``train`` and ``test`` are finite, *unbatched* ``tf.data.Dataset`` s of
  ``(image, label)``: image float32 HxWx3 in [0, 1] (all the same size),
  label an integer scalar in [0, num_classes). Do not shard, shuffle, batch,
  repeat or augment them: cifar_dist enumerates each element, gives rank r
  the elements r, r + size, ... (``dataset.shard(size, rank)`` before
  batching), shuffles them per epoch from (seed, epoch, rank), batches them,
  drops the remainder so that every rank runs the same number of steps, and
  applies the ``data.augment`` options exactly as for CIFAR-10.
- ``decode`` (optional) maps the first element of each pair to the image
  *after* sharding and shuffling, so each rank reads and decodes only its own
  part: yield file names and decode them there (``data=folder`` does this).
- A dataset whose ``cardinality()`` is unknown (``from_generator``,
  ``filter``) needs its size stated: ``train_size`` / ``test_size`` (it is
  never read through to count it: it may never end). A stated size is
  asserted (``assert_cardinality``): a dataset that holds more or fewer
  elements stops with TensorFlow's error when reached, not a stall.
- The first elements of each split are checked (``checks.check_elements``):
  HxWx3 images in [0, 1], integer labels in [0, num_classes), unbatched. A
  stream is not read whole before training: every batch is checked as it is
  read (``checked_batch``: labels in [0, num_classes), which ``tf.one_hot``
  would turn into a row of zeros, and float images for NaN and inf), and one
  that fails stops the run in one line naming the element
  (``bad_input_in_one_line``), not as a diverged loss or a silent score.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf

from cifar_dist.data.arrays import DataArrays
from cifar_dist.data.batches import DataError
from cifar_dist.data.checks import empty_split, label_out_of_range, non_finite_element
from cifar_dist.data.pipeline import (
    _EPOCH_STRIDE,
    EvalStream,
    TrainStream,
    _prefetch,
    augment_batch_all,
    checked_steps,
    eval_stream,
    train_stream,
    without_model_thread,
)
from cifar_dist.data.sampling import validation_share
from cifar_dist.data.sources import budget_words


@dataclass(frozen=True)
class DataStreams:
    """What a data factory returns: unbatched train/test datasets of (image, label) and the class count."""

    train: tf.data.Dataset
    test: tf.data.Dataset
    num_classes: int
    class_names: Sequence[str] = ()  # default: "0", "1", ...
    decode: Optional[Callable[[tf.Tensor], tf.Tensor]] = None  # per element, after sharding; default: none
    train_size: Optional[int] = None  # default: cardinality(); needed when TensorFlow cannot know it
    test_size: Optional[int] = None
    source: str = "a tf.data factory"

    def __post_init__(self):
        if not isinstance(self.train, tf.data.Dataset) or not isinstance(self.test, tf.data.Dataset):
            raise DataError("a data factory must return tf.data.Dataset objects as train and test; see docs/data.md")
        if int(self.num_classes) < 2:
            raise DataError(f"a data factory returned num_classes={self.num_classes}; it must be >= 2")
        names = tuple(self.class_names) or tuple(str(i) for i in range(int(self.num_classes)))
        if len(names) != int(self.num_classes):
            raise DataError(
                f"a data factory returned {len(names)} class_names for num_classes={self.num_classes}; "
                "give one name per class"
            )
        object.__setattr__(self, "class_names", names)
        for split in ("train", "test"):
            size = _size(getattr(self, split), split, getattr(self, f"{split}_size"))
            object.__setattr__(self, f"{split}_size", size)
            object.__setattr__(self, split, getattr(self, split).apply(tf.data.experimental.assert_cardinality(size)))

    def images(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """``dataset`` with ``decode`` applied: (float32 image, int label) pairs."""
        return dataset.map(lambda x, y: (self.image(x), y), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    def image(self, x: tf.Tensor) -> tf.Tensor:
        """The first element of a pair as a float32 image: ``decode`` applied, uint8 scaled to [0, 1]."""
        return tf.image.convert_image_dtype((self.decode or (lambda x: x))(x), tf.float32)

    @property
    def image_shape(self) -> tuple:
        """The (H, W, 3) of the images after ``decode`` (one image is decoded to find out)."""
        return tuple(next(iter(self.images(self.train.take(1))))[0].shape)

    def fit_images(self, n: int) -> np.ndarray:
        """Up to n training images as float32 (for layers fitted to the data, e.g. airbench's whitening)."""
        batch = next(iter(self.images(self.train.take(n)).batch(n)))
        return batch[0].numpy().astype(np.float32)

    def as_arrays(self, budget: int):
        """Both splits read into memory, in order, as ``DataArrays`` (what engine=jax trains on): refused in one line
        when their float32 images would take more than ``budget`` bytes."""
        needed = (self.train_size + self.test_size) * int(np.prod(self.image_shape)) * 4
        if needed > budget:
            raise DataError(
                f"{self.source}: engine=jax reads a tf.data factory's images into memory, {needed / 2**30:.1f} GiB "
                f"here, more than {budget_words(budget)}; return DataSources of uint8 images "
                "(docs/data.md), or train on engine=tensorflow/horovod, which stream it"
            )
        (x_train, y_train), (x_test, y_test) = self.arrays("train"), self.arrays("test")
        return DataArrays(x_train, y_train, x_test, y_test, self.class_names, self.source)

    def arrays(self, split: str = "test"):
        """A whole split ("test" or "train") as (float32 images, int64 labels), for scoring (task=evaluate): each
        batch read is copied into one array made up front (the split's images in memory once, never stacked)."""
        n = self.test_size if split == "test" else self.train_size
        images, labels, filled = np.empty((n, *self.image_shape), np.float32), np.empty(n, np.int64), 0
        for x, y in self.images(self.test if split == "test" else self.train).batch(256):
            images[filled : filled + len(x)], labels[filled : filled + len(x)] = x.numpy(), y.numpy()
            filled += len(x)
        return images, labels


def _size(dataset: tf.data.Dataset, split: str, stated: Optional[int]) -> int:
    """The number of elements of ``dataset``: its cardinality, or ``stated`` when TensorFlow cannot know it
    (a generator, ``filter``); a dataset of unknown size is never read through to count it (it may be endless)."""
    n = int(dataset.cardinality())
    if n == tf.data.INFINITE_CARDINALITY:
        raise DataError(
            f"the {split} dataset of the data factory is infinite (repeat()?); return one pass over the data"
        )
    if n == tf.data.UNKNOWN_CARDINALITY and not stated:
        raise DataError(
            f"the {split} dataset of the data factory has a size TensorFlow cannot know (from_generator, "
            f"filter...); give DataStreams({split}_size=N), its number of elements"
        )
    if stated and n >= 0 and int(stated) != n:
        raise DataError(
            f"the data factory says {split}_size={stated} but its {split} dataset holds {n} elements; "
            f"leave {split}_size unset or give {n}"
        )
    n = int(stated) if stated else n
    if n <= 0:
        raise DataError(f"the {split} dataset of the data factory is empty; {empty_split(split)}")
    return n


# Start the messages of the assertions ``checked_batch`` adds: then "<split>|<source>" (and "|<num_classes>" for a
# label), then the first bad element's index (and its label).
NON_FINITE = "cifar_dist: non-finite input: "
BAD_LABEL = "cifar_dist: label out of range: "


def checked_batch(images, labels, index, *, split: str, source: str, num_classes: int, floating: bool):
    """A batch as read (``index``: its elements' numbers), as (images, one-hot labels), asserted to hold labels in
    [0, num_classes) and, for float images (``floating``), no NaN or infinite pixel. A stream cannot be read whole
    before training as arrays are (``checks.check_arrays``): without this a label out of range would become a row
    of zeros (``tf.one_hot``), trained on and scored without a word, and a NaN image a diverged loss blamed on the
    learning rate. Two reductions per batch."""
    labels = tf.cast(labels, tf.int64)
    in_range = tf.logical_and(labels >= 0, labels < num_classes)
    where = f"{split}|{source}"
    checks = [
        tf.debugging.Assert(
            tf.reduce_all(in_range),
            [
                f"{BAD_LABEL}{where}|{num_classes}",
                tf.boolean_mask(index, ~in_range)[:1],
                tf.boolean_mask(labels, ~in_range)[:1],
            ],
        )
    ]
    if floating:
        finite = tf.reduce_all(tf.math.is_finite(tf.reshape(images, [tf.shape(images)[0], -1])), axis=1)
        checks.append(
            tf.debugging.Assert(tf.reduce_all(finite), [f"{NON_FINITE}{where}", tf.boolean_mask(index, ~finite)[:1]])
        )
    with tf.control_dependencies(checks):
        return tf.identity(images), tf.one_hot(tf.cast(labels, tf.int32), num_classes)


@contextmanager
def bad_input_in_one_line() -> Iterator[None]:
    """Keras' fit or evaluate over streams: a batch that failed one of ``checked_batch``'s assertions becomes the
    one-line DataError that names the split, the data and the element; any other error passes unchanged."""
    try:
        yield
    except tf.errors.InvalidArgumentError as exc:
        message = str(exc.message)
        nan = re.search(rf"\[{re.escape(NON_FINITE)}(\w+)\|(.*?)\] \[(\d+)\]", message)
        label = re.search(rf"\[{re.escape(BAD_LABEL)}(\w+)\|(.*)\|(\d+)\] \[(\d+)\] \[(-?\d+)\]", message)
        if nan is not None:
            split, source, index = nan.groups()
            problem = non_finite_element(int(index))
        elif label is not None:
            split, source, classes, index, value = label.groups()
            problem = label_out_of_range(int(value), int(classes), int(index))
        else:
            raise
        raise DataError(f"the {split} dataset of {source} {problem} (docs/data.md)") from None


def _floating(data: DataStreams, dataset: tf.data.Dataset) -> bool:
    """Whether ``dataset``'s images are float once decoded (uint8 ones cannot hold a NaN: nothing to check)."""
    decode = data.decode or (lambda x: x)
    return dataset.map(lambda x, y: (decode(x), y)).element_spec[0].dtype.is_floating


def streamed_train(
    data: DataStreams,
    *,
    batch_size: int,
    rank: int,
    size: int,
    shard: bool,
    seed: int,
    initial_epoch: int,
    epochs: int,
    augment,
    shuffle_buffer: int = 0,
    prefetch: int = -1,
) -> TrainStream:
    """This rank's batches for epochs [initial_epoch, epochs), streamed from ``data.train``.

    shard=True: rank r takes elements r, r + size, ...; shard=False (the
    seed's policy): every rank walks the whole set in its own order. Either
    way all ranks run the same number of full batches.
    """
    n = int(data.train_size)
    steps = checked_steps(n, batch_size, size, shard)
    used = steps * batch_size
    seed_t = tf.constant(seed, tf.int64)
    image_bits = tf.random.stateless_uniform([n], tf.stack([seed_t ^ 0xF11F, tf.constant(0, tf.int64)])) < 0.5
    mine = data.train.enumerate()
    if shard:
        mine = mine.shard(size, rank)
    buffer = shuffle_buffer or (math.ceil(n / size) if shard else n)
    checks = dict(source=data.source, num_classes=int(data.num_classes), floating=_floating(data, data.train))

    def epoch_batches(epoch):
        stream = epoch * _EPOCH_STRIDE + rank
        order = mine.shuffle(buffer, seed=seed * _EPOCH_STRIDE + stream, reshuffle_each_iteration=False).take(used)
        images = order.map(
            lambda i, xy: (i, data.image(xy[0]), xy[1]), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        return tf.data.Dataset.zip(
            (
                tf.data.Dataset.from_tensors(epoch).repeat(steps),
                tf.data.Dataset.range(steps),
                images.batch(batch_size, drop_remainder=True),
            )
        )

    def load(epoch, step, batch):
        index, images, labels = batch
        images, labels = checked_batch(images, labels, index, split="train", **checks)
        if augment.enabled:
            batch_seed = tf.stack([seed_t ^ 0x5EED, (epoch * _EPOCH_STRIDE + rank) * 1_000_000 + step])
            images = augment_batch_all(images, index, epoch, batch_seed, augment, image_bits)
        return images, labels

    ds = (
        tf.data.Dataset.range(initial_epoch, epochs)
        .flat_map(epoch_batches)
        .map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(_prefetch(prefetch))
    )
    return TrainStream(without_model_thread(ds), steps, used)


def streamed_eval(data: DataStreams, *, batch_size: int, rank: int, size: int, equal_shards: bool) -> EvalStream:
    """This rank's part of ``data.test``, in order: as ``pipeline.eval_stream`` does for arrays."""
    n = int(data.test_size)
    mine = data.test.enumerate().shard(size, rank)
    count = len(range(rank, n, size))
    if equal_shards:
        count = validation_share(n, size)
        mine = mine.take(count)
    checks = dict(source=data.source, num_classes=int(data.num_classes), floating=_floating(data, data.test))

    def batch(index, images, labels):
        return checked_batch(images, labels, index, split="test", **checks)

    ds = (
        mine.map(lambda i, xy: (i, data.image(xy[0]), xy[1]), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .batch(batch_size)
        .map(batch, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    return EvalStream(without_model_thread(ds), max(1, math.ceil(count / batch_size)) if count else 0, count)


def train_input(
    data,
    *,
    batch_size: int,
    rank: int,
    size: int,
    shard: bool,
    seed: int,
    initial_epoch: int,
    epochs: int,
    augment,
    shuffle_buffer: int = 0,
    prefetch: int = -1,
) -> TrainStream:
    """This rank's training stream of any data set: in-memory CIFAR arrays or ``DataStreams``."""
    common = dict(
        batch_size=batch_size,
        rank=rank,
        size=size,
        shard=shard,
        seed=seed,
        initial_epoch=initial_epoch,
        epochs=epochs,
        augment=augment,
        prefetch=prefetch,
    )
    if isinstance(data, DataStreams):
        return streamed_train(data, shuffle_buffer=shuffle_buffer, **common)

    return train_stream(data.x_train, data.y_train, num_classes=data.num_classes, **common)


def eval_input(data, *, batch_size: int, rank: int, size: int, equal_shards: bool) -> EvalStream:
    """This rank's part of the test split of any data set (see ``pipeline.eval_stream``)."""
    if isinstance(data, DataStreams):
        return streamed_eval(data, batch_size=batch_size, rank=rank, size=size, equal_shards=equal_shards)

    return eval_stream(
        data.x_test,
        data.y_test,
        batch_size=batch_size,
        rank=rank,
        size=size,
        equal_shards=equal_shards,
        num_classes=data.num_classes,
    )
