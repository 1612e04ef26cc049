"""engine=jax's augmentation, drawn in the compiled step, matches the tf.data pipeline's as a distribution.

The ops themselves against references (numpy, and TensorFlow's own transform
where TensorFlow is installed); the draws on fixed seeds: shapes, the range
of the shifts, the share of flips, alternating flips by epoch parity, cutout's
square; and the batches: the same (seed, epoch, rank, step) draws the same
batch, two ranks draw different ones, every image of a rank's shard once per
epoch.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from cifar_dist.data.sampling import rank_order  # noqa: E402
from cifar_dist.training.engines import jax_augment as aug  # noqa: E402
from cifar_dist.training.engines.jax_data import AugmentPlan, StepPlan, device_batch  # noqa: E402

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]

SEED_AUGMENT = AugmentPlan(True, 0.1, 0.1, True, False, 0, 0)  # the seed's ImageDataGenerator
AIRBENCH = AugmentPlan(True, 0.0, 0.0, True, True, 2, 0)  # experiment=speedrun's


def images(n=8, size=32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, size, size, 3)).astype(np.float32)


def numpy_bilinear_shift(x: np.ndarray, dx: float, dy: float) -> np.ndarray:
    """Output pixel (i, j) samples input (i - dy, j - dx), bilinear, coordinates clamped to the border."""
    h, w = x.shape[:2]
    out = np.zeros_like(x)
    for i in range(h):
        for j in range(w):
            y, xx = min(max(i - dy, 0), h - 1), min(max(j - dx, 0), w - 1)
            y0, x0 = int(np.floor(y)), int(np.floor(xx))
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            fy, fx = y - y0, xx - x0
            top = (1 - fx) * x[y0, x0] + fx * x[y0, x1]
            bottom = (1 - fx) * x[y1, x0] + fx * x[y1, x1]
            out[i, j] = (1 - fy) * top + fy * bottom
    return out


def test_the_bilinear_shift_is_the_generators_shift_with_the_border_repeated():
    x = images(3, size=12)
    dx, dy = np.array([1.3, -2.7, 0.0], np.float32), np.array([-0.4, 2.2, 3.9], np.float32)
    got = np.asarray(aug.shift_bilinear(jnp.asarray(x), jnp.asarray(dx), jnp.asarray(dy)))
    for k in range(3):
        np.testing.assert_allclose(got[k], numpy_bilinear_shift(x[k], dx[k], dy[k]), atol=1e-5)


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")
def test_the_shift_equals_the_tf_data_pipelines_transform():
    import tensorflow as tf

    x = images(4)
    dx, dy = np.array([3.1, -0.5, 2.0, -3.2], np.float32), np.array([0.7, -3.0, 1.5, 0.0], np.float32)
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    transforms = np.stack([ones, zeros, -dx, zeros, ones, -dy, zeros, zeros], axis=1)
    expected = tf.raw_ops.ImageProjectiveTransformV3(
        images=x,
        transforms=transforms,
        output_shape=[32, 32],
        fill_value=0.0,
        interpolation="BILINEAR",
        fill_mode="NEAREST",
    ).numpy()
    got = np.asarray(aug.shift_bilinear(jnp.asarray(x), jnp.asarray(dx), jnp.asarray(dy)))
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_the_translation_is_airbenchs_pad_and_crop_with_reflected_borders():
    x = images(2, size=10)
    got = np.asarray(aug.translate_reflect(jnp.asarray(x), jnp.array([2, -1]), jnp.array([-2, 1])))
    for k, (dx, dy) in enumerate([(2, -2), (-1, 1)]):
        padded = np.pad(x[k], ((2, 2), (2, 2), (0, 0)), mode="symmetric")  # d c b a | a b c d | d c b a
        expected = padded[2 - dy : 2 - dy + 10, 2 - dx : 2 - dx + 10]
        np.testing.assert_array_equal(got[k], expected)


def test_the_seeds_augmentation_keeps_shapes_flips_half_and_shifts_within_the_range():
    n = 512
    # One bright column per image: where it lands says how far and which way the image moved.
    x = np.zeros((n, 32, 32, 3), np.float32)
    x[:, :, 10, :] = 1.0
    out = np.asarray(aug.augment(jnp.asarray(x), jax.random.key(3), SEED_AUGMENT, jnp.zeros(n, bool), 0))
    assert out.shape == x.shape and out.dtype == np.float32
    column = out[:, 16, :, 0]  # a middle row: the bright column's weight per x
    centre = (column * np.arange(32)).sum(axis=1) / column.sum(axis=1)
    flipped = centre > 15.5
    moved = np.where(flipped, 31 - centre, centre) - 10  # undo the flip: the shift alone
    assert 0.4 < flipped.mean() < 0.6  # flips with probability 1/2
    assert np.abs(moved).max() <= 0.1 * 32 + 1e-4  # shifts within +-10 % of the width
    assert moved.std() > 1.0  # and spread over it (uniform: std 3.2 / sqrt 3 = 1.85)


def test_the_alternating_flip_mirrors_the_images_whose_bit_matches_the_epochs_parity():
    x = images(6)
    bits = jnp.array([True, False, True, False, False, True])
    no_translation = AugmentPlan(True, 0.0, 0.0, True, True, 0, 0)
    for epoch in (0, 1, 2, 3):
        out = np.asarray(aug.augment(jnp.asarray(x), jax.random.key(0), no_translation, bits, epoch))
        mirrored = np.array([np.array_equal(o, i[:, ::-1]) for o, i in zip(out, x)])
        np.testing.assert_array_equal(mirrored, np.asarray(bits) != (epoch % 2 == 1))


def test_cutout_zeroes_one_square_per_image_at_most_size_squared_pixels():
    x = np.ones((64, 32, 32, 3), np.float32)
    out = np.asarray(aug.augment(jnp.asarray(x), jax.random.key(1), AugmentPlan(True, cutout=8), jnp.zeros(64), 0))
    zeroed = (out[..., 0] == 0).sum(axis=(1, 2))
    assert zeroed.max() == 64 and zeroed.min() >= 16  # a whole 8x8 square, or one clipped at a corner (>= 4x4)
    rows, cols = np.nonzero(out[0, ..., 0] == 0)
    assert rows.max() - rows.min() + 1 <= 8 and cols.max() - cols.min() + 1 <= 8


def draw(rank: int, step: int, epoch: int = 0, seed: int = 42, plan=AIRBENCH):
    """One rank's batch of 16 as the compiled step draws it on its device, the rank holding 64 images."""
    rng = np.random.default_rng(0)
    block = jnp.asarray(rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8))
    labels, bits = jnp.asarray(rng.integers(0, 10, 64)), jnp.asarray(rng.random(64) < 0.5)
    order = jnp.asarray(np.random.default_rng(epoch).permutation(64).astype(np.int32))
    step_plan = StepPlan(16, 1, 10, plan, streamed=False)
    x, y = device_batch(step_plan, block, labels, bits, order, jnp.array([rank], jnp.int32), seed, epoch, step, 0)
    return np.asarray(x), np.asarray(y)


def test_a_batch_is_a_pure_function_of_seed_epoch_rank_and_step_and_ranks_draw_differently():
    x, y = draw(rank=0, step=1)
    again, _ = draw(rank=0, step=1)
    other_rank, _ = draw(rank=1, step=1)
    other_step, _ = draw(rank=0, step=2)
    other_seed, _ = draw(rank=0, step=1, seed=43)
    assert x.shape == (16, 32, 32, 3) and y.shape == (16, 10) and np.allclose(y.sum(axis=1), 1)
    np.testing.assert_array_equal(x, again)
    assert not np.array_equal(x, other_rank)  # same images (the same order here), other augmentation
    assert not np.array_equal(x, other_step) and not np.array_equal(x, other_seed)
    assert 0.0 <= x.min() and x.max() <= 1.0  # uint8 pixels scaled as the seed did


def test_an_epoch_walks_every_image_of_the_shard_once():
    plain = AugmentPlan()  # no augmentation: the pixels say which image was drawn
    rng = np.random.default_rng(0)
    block = rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
    seen = []
    for step in range(4):
        order = jnp.asarray(np.random.default_rng(5).permutation(64).astype(np.int32))
        x, _ = device_batch(
            StepPlan(16, 1, 10, plain, False), jnp.asarray(block), jnp.zeros(64, jnp.int32), jnp.zeros(64, bool),
            order, jnp.array([0], jnp.int32), 42, 0, step, 0,
        )  # fmt: skip
        seen += [int(np.flatnonzero((block == np.round(np.asarray(img) * 255)).all(axis=(1, 2, 3)))[0]) for img in x]
    assert sorted(seen) == list(range(64))


def test_a_ranks_order_of_an_epoch_is_a_permutation_drawn_from_seed_epoch_and_rank_alone():
    """The order a rank walks its images in (drawn on the host, sent once an epoch): the same wherever the rank
    runs and on a resume, another for another epoch, rank or seed."""
    order = rank_order(1000, seed=42, epoch=3, rank=1)
    assert order.dtype == np.int32 and sorted(order) == list(range(1000))
    np.testing.assert_array_equal(order, rank_order(1000, seed=42, epoch=3, rank=1))
    for other in (dict(seed=43, epoch=3, rank=1), dict(seed=42, epoch=4, rank=1), dict(seed=42, epoch=3, rank=0)):
        assert not np.array_equal(order, rank_order(1000, **other)), other
