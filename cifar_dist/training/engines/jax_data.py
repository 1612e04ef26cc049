"""engine=jax's input: each rank's training images kept on its device, batches drawn inside the compiled step.

airbench's recipe, for any data set that fits: the images stay on the device
as uint8 (CIFAR-10's 50,000 are 150 MB), and each batch's gather and its
augmentation (``jax_augment.py``) are device ops of the compiled training
step. The epoch's order is drawn on the host and sent once an epoch (4 bytes
an image; a program drawing it cost every run 0.15 s to trace and load, the
host 1 ms). A step then costs the host nothing but its dispatch, and
``trainer.steps_per_execution`` steps are one dispatch (``jax_fit.py``).

A rank is a device (``world.py``): a device's rank is its place in the job's
mesh (``jax.devices()``'s order: process by process, each process's devices in
order), so rank r draws the same batches whether it is the second device of
process 0 or the only device of process 1. Which images a rank trains on
follows ``trainer.epoch_policy``, as on tf.data (``data/pipeline.py``):
``divide`` (the seed's), every rank walks the whole set in its own order each
epoch; ``shard``, rank r owns the images r, r + ranks, ... (one fixed 1/ranks
of the set, as a sharded tf.data stream does) and walks them in a new order
each epoch. Each device holds its rank's images and takes
``trainer.batch_size`` of them a step. Every random choice is drawn from
(trainer.seed, epoch, rank, step): a stream is a pure function of the config
and the number of ranks, and a resumed run sees what an uninterrupted one saw,
in whichever layout of processes and devices it resumes.

Data that does not fit in the device's memory streams instead (``placement``):
the host gathers each execution's batches and copies them to the devices one
execution ahead, and the same compiled code augments them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from cifar_dist.common.errors import ConfigError
from cifar_dist.data.sampling import EPOCH_STRIDE, checked_steps, eval_indices, flip_bits, rank_images, rank_order
from cifar_dist.training.engines.jax_augment import augment

log = logging.getLogger(__name__)

AXIS = "batch"  # the mesh axis of Keras' DataParallel: every device of the job along it
_AUGMENT_SALT = 0x5EED  # keeps the augmentations' stream apart


@dataclass(frozen=True)
class AugmentPlan:
    """``data.augment`` as plain, hashable values: what the compiled step is traced with."""

    enabled: bool = False
    width_shift: float = 0.0
    height_shift: float = 0.0
    horizontal_flip: bool = False
    alternating_flip: bool = False
    translate: int = 0
    cutout: int = 0

    @classmethod
    def of(cls, augment_cfg) -> AugmentPlan:
        if not augment_cfg.enabled:
            return cls()
        return cls(
            enabled=True,
            width_shift=float(augment_cfg.width_shift),
            height_shift=float(augment_cfg.height_shift),
            horizontal_flip=bool(augment_cfg.horizontal_flip),
            alternating_flip=bool(augment_cfg.alternating_flip),
            translate=int(augment_cfg.translate),
            cutout=int(augment_cfg.cutout),
        )


@dataclass(frozen=True)
class StepPlan:
    """What one training step draws, fixed for the run: the static arguments of the compiled step."""

    batch_size: int  # per rank: what each device takes of every step
    local_devices: int  # of this process: its ranks
    num_classes: int
    augment: AugmentPlan
    streamed: bool  # batches come from the host, one execution at a time


@dataclass
class DeviceTrainSet:
    """This process's ranks' training images as the compiled step reads them (``jax_fit.fit``'s ``train``)."""

    mesh: Mesh
    plan: StepPlan
    seed: int
    steps_per_epoch: int
    images_per_rank_epoch: int
    block: Optional[tuple]  # (images, labels, flip bits), each device its rank's images; None when streamed
    host: tuple  # (images, labels, flip bits) on the host (numpy): what the devices' blocks are taken from
    rows: List[slice]  # per local device, the rows of ``host`` its rank owns (``sampling.rank_images``)
    ranks: jax.Array  # (devices,): each device's rank

    @property
    def owned_images(self) -> int:
        """The images each rank walks in an epoch (all of them, or its shard)."""
        return len(range(len(self.host[0]))[self.rows[0]])

    def owned_rows(self, local: int) -> np.ndarray:
        """The indices into ``host`` of the images local device ``local``'s rank owns, in order."""
        return np.arange(len(self.host[0]))[self.rows[local]]


def rank_part(host: tuple, rows) -> tuple:
    """The part of ``host`` (images, labels, flip bits) at ``rows`` (a slice: views of it, no copy; indices)."""
    return tuple(part[rows] for part in host)


def job_mesh() -> Mesh:
    """Every device of the job along one axis, in ``jax.devices()`` order: Keras' ``DataParallel`` mesh."""
    return Mesh(np.array(jax.devices()), (AXIS,))


def local_ranks(mesh: Mesh) -> List[int]:
    """The ranks of this process's devices: their places in ``mesh``."""
    return [i for i, device in enumerate(mesh.devices.flat) if device.process_index == jax.process_index()]


def local_devices(mesh: Mesh) -> list:
    """This process's devices, in mesh order."""
    return [device for device in mesh.devices.flat if device.process_index == jax.process_index()]


def per_device(parts: Sequence[np.ndarray], mesh: Mesh) -> jax.Array:
    """One global array split along its first axis over ``mesh``: this process's devices get ``parts`` (one
    each, in mesh order, all of one shape); every process passes its own."""
    shards = [jax.device_put(part, device) for part, device in zip(parts, local_devices(mesh))]
    shape = (mesh.devices.size * parts[0].shape[0], *parts[0].shape[1:])
    return jax.make_array_from_single_device_arrays(shape, NamedSharding(mesh, P(AXIS)), shards)


def shared(array: np.ndarray, mesh: Mesh) -> jax.Array:
    """A numpy array every process knows alike, split along its first axis over the devices of ``mesh``."""
    return jax.make_array_from_callback(array.shape, NamedSharding(mesh, P(AXIS)), lambda index: array[index])


def train_set(data, *, batch_size, rank, size, shard, seed, augment_cfg, placement: str) -> DeviceTrainSet:
    """This process's ranks' training set for engine=jax, on their devices (or on the host when ``placement``
    says to stream); ``data``: arrays of uint8 (or float) images and integer labels (``data.x_train``,
    ``data.y_train``). ``rank``, ``size``: this process's first rank and the job's ranks (``World``)."""
    mesh = job_mesh()
    mine = local_ranks(mesh)
    if mesh.devices.size != size or mine[0] != rank:
        raise RuntimeError(
            f"the job's mesh ({mesh.devices.size} devices, this process's from {mine[0]}) is not its "
            f"world ({size} ranks, this process's from {rank})"
        )
    n = int(data.x_train.shape[0])
    steps = checked_steps(n, batch_size, size, shard)
    host = (np.asarray(data.x_train), np.asarray(data.y_train, np.int32), flip_bits(n, seed))
    rows = [rank_images(n, r, size, shard) for r in mine]
    parts = [rank_part(host, r) for r in rows]
    streamed = stream_instead(parts[0][0].nbytes, placement, mesh)
    plan = StepPlan(batch_size, len(mine), int(data.num_classes), AugmentPlan.of(augment_cfg), streamed)
    block = None if streamed else tuple(per_device([part[i] for part in parts], mesh) for i in range(3))
    ranks = shared(np.arange(size, dtype=np.int32), mesh)
    return DeviceTrainSet(mesh, plan, int(seed), steps, steps * batch_size, block, host, rows, ranks)


def device_memory(device) -> Optional[int]:
    """The bytes ``device`` may allocate (JAX's own limit), or None where it does not say (the CPU)."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    return int(stats["bytes_limit"]) if stats and "bytes_limit" in stats else None


# The share of a device's memory the training images may take on it; the model, its optimizer state and the
# step's activations need the rest. CIFAR-10 (150 MB) is 0.2 % of an 80 GB GPU.
DEVICE_SHARE = 0.25


def stream_instead(nbytes: int, placement: str, mesh: Mesh) -> bool:
    """Whether the training images (``nbytes`` per device) stream from the host (``data.placement``): auto
    keeps them on the device when they fit in ``DEVICE_SHARE`` of its memory (a CPU's "device" is the host)."""
    if placement == "stream":
        return True
    limit = device_memory(jax.local_devices()[0])  # (another process's devices do not answer here)
    fits = limit is None or nbytes <= DEVICE_SHARE * limit
    if placement == "device" and not fits:
        raise ConfigError(
            f"data.placement=device: the training images take {nbytes / 2**30:.1f} GiB per device, more than "
            f"{DEVICE_SHARE:.0%} of its {limit / 2**30:.1f} GiB; use data.placement=auto (streams them) or more "
            "processes with trainer.epoch_policy=shard"
        )
    if not fits:
        log.info(
            "the training images (%.1f GiB per device) exceed %.0f%% of the device's %.1f GiB: streamed from the "
            "host, one execution ahead (data.placement=auto)",
            nbytes / 2**30,
            100 * DEVICE_SHARE,
            limit / 2**30,
        )
    return not fits


def float_images(images: jax.Array) -> jax.Array:
    """uint8 pixels to float32 in [0, 1], as the seed did (x /= 255); float images as they are."""
    if images.dtype == jnp.uint8:
        return images.astype(jnp.float32) / 255.0
    return images.astype(jnp.float32)


def epoch_order(train: DeviceTrainSet, epoch: int):
    """Each local rank's order of its images for ``epoch`` (``sampling.rank_order``), in mesh order: on its device,
    or, where the data streams, on the host, where its batches are gathered (``streamed_block``)."""
    orders = [rank_order(train.owned_images, train.seed, epoch, rank) for rank in local_ranks(train.mesh)]
    return orders if train.plan.streamed else per_device(orders, train.mesh)


def device_batch(plan: StepPlan, images, labels, bits, order, rank, seed, epoch, step, first):
    """One rank's part of step ``step``'s batch, on its device (inside ``shard_map``): images as float32, one-hot
    labels.

    Resident data: ``order`` is the rank's permutation of its images; the step takes the next ``batch_size``.
    Streamed data: the block holds the rank's rows of the steps from ``first`` on."""
    width = plan.batch_size
    start = (step - first if plan.streamed else step) * width
    rows = jax.lax.dynamic_slice_in_dim(order, start, width)
    x = float_images(images[rows])
    if plan.augment.enabled:
        key = jax.random.fold_in(jax.random.key(seed ^ _AUGMENT_SALT), epoch * EPOCH_STRIDE + rank[0])
        x = augment(x, jax.random.fold_in(key, step), plan.augment, bits[rows], epoch)
    return x, jax.nn.one_hot(labels[rows], plan.num_classes)


def batch_fn(train: DeviceTrainSet):
    """``(images, labels, bits, order, ranks, seed, epoch, step, first) -> (x, y)``: the global batch of a step,
    each rank's part drawn by ``device_batch`` on its device, split along the batch as Keras' DataParallel
    splits it."""

    def on_the_device(images, labels, bits, order, rank, seed, epoch, step, first):
        return device_batch(train.plan, images, labels, bits, order, rank, seed, epoch, step, first)

    spec = P(AXIS)
    return jax.shard_map(
        on_the_device,
        mesh=train.mesh,
        in_specs=(spec, spec, spec, spec, spec, P(), P(), P(), P()),
        out_specs=(spec, spec),
    )


def streamed_block(train: DeviceTrainSet, orders: Sequence[np.ndarray], first_step: int, steps: int):
    """(images, labels, bits, order) of ``steps`` steps from ``first_step``, gathered on the host and copied to
    this process's devices: each device its rank's rows of those steps, in the epoch's order (``orders``: each
    local device's)."""
    batch, last = train.plan.batch_size, train.steps_per_epoch - 1  # past the epoch's end: its last step (unused)
    parts = []
    for local, order in enumerate(orders):
        picked = np.concatenate([order[min(s, last) * batch :][:batch] for s in range(first_step, first_step + steps)])
        parts.append(rank_part(train.host, train.owned_rows(local)[picked]))
    block = tuple(per_device([part[i] for part in parts], train.mesh) for i in range(3))
    identity = np.arange(steps * batch, dtype=np.int32)
    return (*block, per_device([identity] * len(orders), train.mesh))


@dataclass(frozen=True)
class EvalArrays:
    """This process's slice of an evaluation split, on the host: ``jax_fit.evaluate`` copies it to the first
    device a chunk at a time."""

    images: np.ndarray
    labels: np.ndarray  # int32 class indices
    batch_size: int
    num_classes: int

    @property
    def samples(self) -> int:
        return len(self.labels)

    @property
    def steps(self) -> int:
        return math.ceil(self.samples / self.batch_size)


def eval_set(data, *, batch_size: int, rank: int, size: int, equal_shards: bool) -> EvalArrays:
    """The test images rank ``rank`` scores (``sampling.eval_indices``)."""
    rows = eval_indices(len(data.y_test), rank, size, equal_shards)
    return EvalArrays(data.x_test[rows], np.asarray(data.y_test[rows], np.int32), batch_size, int(data.num_classes))
