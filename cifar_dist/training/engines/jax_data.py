"""engine=jax's input: each process's training images kept on its devices, batches drawn inside the compiled step.

airbench's recipe, for any data set that fits: the images stay on the device
as uint8 (CIFAR-10's 50,000 are 150 MB), and the epoch's permutation, each
batch's gather and its augmentation (``jax_augment.py``) are device ops of the
compiled training step. A step then costs the host nothing but its dispatch,
and ``trainer.steps_per_execution`` steps are one dispatch (``jax_fit.py``).

Which images a process trains on follows ``trainer.epoch_policy``, as on
tf.data (``data/pipeline.py``): ``divide`` (the seed's), every process walks
the whole set in its own order each epoch; ``shard``, process r owns the
images r, r + size, ... (one fixed 1/size of the set, as a sharded tf.data
stream does) and walks them in a new order each epoch. A process's block is
copied to each of its devices (one per process on GPUs: ``jax_devices.py``),
each device taking its slice of the process's batch. Every random choice is
drawn from (trainer.seed, epoch, process[, device], step): a stream is a pure
function of the config, and a resumed run sees what an uninterrupted one saw.

Data that does not fit in the device's memory streams instead (``placement``):
the host gathers each execution's batches and copies them to the devices one
execution ahead, and the same compiled code augments them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from cifar_dist.common.errors import ConfigError
from cifar_dist.data.sampling import EPOCH_STRIDE, checked_steps, eval_indices, flip_bits, rank_images
from cifar_dist.training.engines.jax_augment import augment

log = logging.getLogger(__name__)

AXIS = "batch"  # the mesh axis of Keras' DataParallel: every device of the job along it
_AUGMENT_SALT, _ORDER_SALT = 0x5EED, 0x0DE5  # keep the streams of permutations and augmentations apart


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

    batch_size: int  # per process
    local_devices: int  # of this process; each takes batch_size / local_devices of every batch
    num_classes: int
    augment: AugmentPlan
    streamed: bool  # batches come from the host, one execution at a time

    @property
    def device_batch(self) -> int:
        return self.batch_size // self.local_devices


@dataclass
class DeviceTrainSet:
    """This process's training images as the compiled step reads them (``jax_fit.fit``'s ``train``)."""

    mesh: Mesh
    plan: StepPlan
    seed: int
    steps_per_epoch: int
    images_per_rank_epoch: int
    block: Optional[tuple]  # (images, labels, flip bits) on the devices; None when streamed
    host: tuple  # the same on the host (numpy): what a streamed run gathers from
    places: jax.Array  # (devices, 2): each device's process index and its index among the process's devices

    def __post_init__(self):
        # Compiled once, now (not in the first epoch), called each epoch.
        scalar = jax.ShapeDtypeStruct((), jnp.int32)
        self._order = _order_fn(self.mesh, self.host[0].shape[0]).lower(self.places, scalar, scalar).compile()


def job_mesh() -> Mesh:
    """Every device of the job along one axis, in ``jax.devices()`` order: Keras' ``DataParallel`` mesh."""
    return Mesh(np.array(jax.devices()), (AXIS,))


def device_places(mesh: Mesh) -> np.ndarray:
    """(process index, index among that process's devices) of each device of ``mesh``, in mesh order."""
    seen: dict = {}
    places = []
    for device in mesh.devices.flat:
        local = seen.get(device.process_index, 0)
        seen[device.process_index] = local + 1
        places.append((device.process_index, local))
    return np.asarray(places, np.int32)


def on_each_device(block: np.ndarray, mesh: Mesh) -> jax.Array:
    """``block`` copied to each of this process's devices: one global array whose shard on a device is its
    process's block (every process passes its own)."""
    here = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    shards = [jax.device_put(block, d) for d in here]
    shape = (mesh.devices.size * block.shape[0], *block.shape[1:])
    return jax.make_array_from_single_device_arrays(shape, NamedSharding(mesh, P(AXIS)), shards)


def shared(array: np.ndarray, mesh: Mesh) -> jax.Array:
    """A numpy array every process knows alike, split along its first axis over the devices of ``mesh``."""
    return jax.make_array_from_callback(array.shape, NamedSharding(mesh, P(AXIS)), lambda index: array[index])


def train_set(data, *, batch_size, rank, size, shard, seed, augment_cfg, placement: str) -> DeviceTrainSet:
    """This process's training set for engine=jax, on its devices (or on the host when ``placement`` says to
    stream); ``data``: arrays of uint8 (or float) images and integer labels (``data.x_train``, ``data.y_train``)."""
    mesh = job_mesh()
    local = sum(1 for d in mesh.devices.flat if d.process_index == jax.process_index())
    if batch_size % local:
        raise ConfigError(
            f"trainer.batch_size={batch_size} does not split over this process's {local} devices; "
            f"use a multiple of {local}"
        )
    n = int(data.x_train.shape[0])
    steps = checked_steps(n, batch_size, size, shard)
    rows = rank_images(n, rank, size, shard)
    host = (
        np.ascontiguousarray(data.x_train[rows]),
        np.asarray(data.y_train[rows], np.int32),
        flip_bits(n, seed)[rows],
    )
    streamed = stream_instead(host[0].nbytes, placement, mesh)
    plan = StepPlan(batch_size, local, int(data.num_classes), AugmentPlan.of(augment_cfg), streamed)
    block = None if streamed else tuple(on_each_device(part, mesh) for part in host)
    return DeviceTrainSet(
        mesh, plan, int(seed), steps, steps * batch_size, block, host, shared(device_places(mesh), mesh)
    )


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


def epoch_order(train: DeviceTrainSet, epoch: int) -> jax.Array:
    """Each process's order of its images for ``epoch``, on its devices (the same on all of them)."""
    return train._order(train.places, jnp.int32(train.seed), jnp.int32(epoch))


def _order_fn(mesh: Mesh, n_block: int):
    def order(place, seed, epoch):
        key = jax.random.fold_in(jax.random.key(seed ^ _ORDER_SALT), epoch * EPOCH_STRIDE + place[0, 0])
        return jax.random.permutation(key, n_block).astype(jnp.int32)

    return jax.jit(jax.shard_map(order, mesh=mesh, in_specs=(P(AXIS), P(), P()), out_specs=P(AXIS)))


def device_batch(plan: StepPlan, images, labels, bits, order, place, seed, epoch, step, first):
    """One device's part of step ``step``'s batch (inside ``shard_map``): images as float32, one-hot labels.

    Resident data: ``order`` is the process's permutation of its images; the device takes its slice of the
    process's batch. Streamed data: the block holds this device's rows of the steps from ``first`` on."""
    process, local = place[0, 0], place[0, 1]
    width = plan.device_batch
    start = (step - first) * width if plan.streamed else step * plan.batch_size + local * width
    rows = jax.lax.dynamic_slice_in_dim(order, start, width)
    x = float_images(images[rows])
    if plan.augment.enabled:
        key = jax.random.fold_in(jax.random.key(seed ^ _AUGMENT_SALT), epoch * EPOCH_STRIDE + process)
        key = jax.random.fold_in(jax.random.fold_in(key, local), step)
        x = augment(x, key, plan.augment, bits[rows], epoch)
    return x, jax.nn.one_hot(labels[rows], plan.num_classes)


def batch_fn(train: DeviceTrainSet):
    """``(images, labels, bits, order, places, seed, epoch, step, first) -> (x, y)``: the global batch of a step,
    each device's part drawn by ``device_batch`` on that device, split along the batch as Keras' DataParallel
    splits it."""

    def per_device(images, labels, bits, order, place, seed, epoch, step, first):
        return device_batch(train.plan, images, labels, bits, order, place, seed, epoch, step, first)

    spec = P(AXIS)
    return jax.shard_map(
        per_device,
        mesh=train.mesh,
        in_specs=(spec, spec, spec, spec, spec, P(), P(), P(), P()),
        out_specs=(spec, spec),
    )


def streamed_block(train: DeviceTrainSet, order: np.ndarray, first_step: int, steps: int):
    """(images, labels, bits, order) of ``steps`` steps from ``first_step``, gathered on the host from this
    process's images in the epoch's ``order`` and copied to its devices: each device's rows of those steps."""
    plan, images, labels, bits = train.plan, *train.host
    last = train.steps_per_epoch - 1  # an execution past the epoch's end repeats its last step (never trained)
    parts = [[], [], []]
    for local in range(plan.local_devices):
        rows = np.concatenate(
            [
                order[min(s, last) * plan.batch_size + local * plan.device_batch :][: plan.device_batch]
                for s in range(first_step, first_step + steps)
            ]
        )
        for part, source in zip(parts, (images, labels, bits)):
            part.append(source[rows])
    here = [d for d in train.mesh.devices.flat if d.process_index == jax.process_index()]
    width = steps * plan.device_batch
    shape = lambda a: (train.mesh.devices.size * width, *a.shape[1:])  # noqa: E731
    sharding = NamedSharding(train.mesh, P(AXIS))
    block = tuple(
        jax.make_array_from_single_device_arrays(shape(p[0]), sharding, [jax.device_put(a, d) for a, d in zip(p, here)])
        for p in parts
    )
    identity = np.arange(width, dtype=np.int32)
    return (*block, on_each_device(identity, train.mesh))


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
