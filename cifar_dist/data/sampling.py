"""Which images a rank trains and scores on, and how many steps that makes: plain numpy, for every engine.

The tf.data pipelines (``pipeline.py``, ``streams.py``) and engine=jax's
device-resident input (``training/engines/jax_data.py``) follow the same
rules from here:

- every rank runs the same number of full batches per epoch (the remainder is
  dropped): a rank that runs one collective fewer than the others deadlocks
  the job;
- ``shard`` policy: rank r takes images r, r + size, ... (1/size of the set);
  the seed's ``divide`` policy: every rank walks the whole set;
- evaluation: equal shards (validation: every rank n // size images, so the
  ranks' means average plainly) or a strided cover (the final test: together
  the ranks score every image exactly once, and sums are combined).
"""

from __future__ import annotations

import numpy as np

from cifar_dist.common.errors import ConfigError
from cifar_dist.data.batches import DataError

# Keeps the seed streams of (epoch, rank) pairs apart.
EPOCH_STRIDE = 1_000_003
# The fixed per-image bits of airbench's alternating flip come from (trainer.seed, this salt).
_FLIP_BITS_SALT = 0xF11F
# engine=jax's epoch orders come from (trainer.seed, this salt, epoch, rank).
_ORDER_SALT = 0x0DE5


def steps_per_epoch(n: int, batch_size: int, size: int, shard: bool) -> int:
    """Full batches per epoch on every rank: of n // size images (shard) or of all n (the seed's policy)."""
    return (n // size if shard else n) // batch_size


def checked_steps(n: int, batch_size: int, size: int, shard: bool) -> int:
    """steps_per_epoch, refused in one line when a rank's share of the data holds no full batch."""
    steps = steps_per_epoch(n, batch_size, size, shard)
    if steps < 1:
        per_rank = n // size if shard else n
        raise ConfigError(
            f"trainer.batch_size={batch_size} is larger than the {per_rank} training images each rank gets; lower it"
        )
    return steps


def rank_images(n: int, rank: int, size: int, shard: bool) -> slice:
    """The training images rank ``rank`` of ``size`` walks each epoch (in the set's order), as a slice: ``x[rows]``
    is a view of the set, not a copy of it (a copy of the whole training set per process, on top of the set)."""
    return slice(rank, (n // size) * size, size) if shard else slice(0, n)


def eval_indices(n: int, rank: int, size: int, equal_shards: bool) -> slice:
    """The evaluation images rank ``rank`` scores, in order, as a slice (a view of the set, as ``rank_images``;
    ``len(range(n)[rows])`` counts them).

    equal_shards=True (validation during fit): every rank gets n // size images
    (images rank, rank + size, ... of the first (n // size) * size); False (the
    final test): rank r takes images r, r + size, ... so together the ranks
    cover every image exactly once."""
    if equal_shards:
        return slice(rank, validation_share(n, size) * size, size)
    return slice(rank, n, size)


def validation_share(n: int, size: int) -> int:
    """The test images each of ``size`` ranks validates on (n // size), refused in one line when that is none: the
    ranks would validate on nothing, and no epoch would have a validation score."""
    if n // size < 1:
        raise DataError(
            f"the test split holds {n} image(s), fewer than the {size} ranks that share it for validation: give it "
            f"at least {size} (a held-out part of the data), or train on fewer ranks"
        )
    return n // size


def flip_bits(n: int, seed: int) -> np.ndarray:
    """One fixed random bit per training image for the alternating flip, from the seed alone (the same on every
    rank, whichever images it holds)."""
    return np.random.default_rng([int(seed), _FLIP_BITS_SALT]).random(n) < 0.5


def rank_order(n: int, seed: int, epoch: int, rank: int) -> np.ndarray:
    """Rank ``rank``'s order of its ``n`` images in ``epoch`` (int32 indices into them), from (seed, epoch, rank)
    alone: the same in whichever process and on whichever device the rank runs, and on a resume."""
    return np.random.default_rng([int(seed), _ORDER_SALT, int(epoch), int(rank)]).permutation(n).astype(np.int32)
