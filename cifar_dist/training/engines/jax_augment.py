"""The recipe's augmentations as JAX array ops, drawn and applied inside the compiled training step (engine=jax).

The same options and the same distributions as the tf.data pipeline's
(``data/pipeline.py``, ``augment_batch_all``), in the same order:

1. the seed's ``ImageDataGenerator``: a horizontal flip with probability 1/2 and
   a shift uniform in [-range, range] x size each way, bilinear, the border
   pixels repeated (``fill_mode="nearest"``);
2. airbench's alternating flip instead of the random one: image i is mirrored in
   the epochs whose parity equals its fixed random bit;
3. airbench's translation: whole pixels in [-translate, translate] each way, the
   borders reflected;
4. cutout: one size x size square zeroed per image, its centre uniform over the image.

Random numbers come from a JAX key the step derives from (seed, epoch, rank,
step): a stream of batches is a pure function of the config, as on tf.data,
though not the same numbers (another generator). Shifts are written as two
small matrix products per image (one per axis, two non-zeros a row): XLA runs
them as dense dots, which the CPU and the GPU both do fast, where a gather of
32 x 32 pixel coordinates per image is slow on a CPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_EXACT = jax.lax.Precision.HIGHEST  # no tf32 rounding of pixel values on GPUs


def flip_where(images: jax.Array, flip: jax.Array) -> jax.Array:
    """Mirror the images (N, H, W, C) whose ``flip`` (N,) is true, left to right."""
    return jnp.where(flip[:, None, None, None], images[:, :, ::-1, :], images)


def _bilinear_rows(shift: jax.Array, n: int) -> jax.Array:
    """(N, n, n) matrices that move n pixels by ``shift`` (N,) each: output i samples input i - shift,
    linearly between the two nearest pixels, coordinates outside the image clamped to its border."""
    source = jnp.arange(n, dtype=jnp.float32)[None, :] - shift[:, None]
    low = jnp.floor(source)
    weight = (source - low)[..., None]
    low = low.astype(jnp.int32)
    columns = jnp.arange(n)
    below = jnp.clip(low, 0, n - 1)[..., None] == columns
    above = jnp.clip(low + 1, 0, n - 1)[..., None] == columns
    return (1.0 - weight) * below + weight * above


def _reflected_rows(shift: jax.Array, n: int) -> jax.Array:
    """(N, n, n) 0/1 matrices that move n pixels by whole ``shift`` (N,) each, the border mirrored
    (``d c b a | a b c d | d c b a``, TensorFlow's REFLECT fill)."""
    source = jnp.arange(n)[None, :] - shift[:, None]
    source = jnp.where(source < 0, -source - 1, source)
    source = jnp.where(source >= n, 2 * n - source - 1, source)
    return (source[..., None] == jnp.arange(n)).astype(jnp.float32)


def _move(images: jax.Array, rows: jax.Array, columns: jax.Array) -> jax.Array:
    """Apply per-image row (N, H, H) and column (N, W, W) matrices to images (N, H, W, C)."""
    moved = jnp.einsum("nij,njwc->niwc", rows, images, precision=_EXACT)
    return jnp.einsum("nkw,niwc->nikc", columns, moved, precision=_EXACT)


def shift_bilinear(images: jax.Array, dx: jax.Array, dy: jax.Array) -> jax.Array:
    """Shift each image by (dx, dy) pixels, fractional, bilinear, the border pixels repeated."""
    height, width = images.shape[1], images.shape[2]
    return _move(images, _bilinear_rows(dy, height), _bilinear_rows(dx, width))


def translate_reflect(images: jax.Array, dx: jax.Array, dy: jax.Array) -> jax.Array:
    """Shift each image by whole (dx, dy) pixels, the borders reflected (airbench's pad-and-crop)."""
    height, width = images.shape[1], images.shape[2]
    return _move(images, _reflected_rows(dy, height), _reflected_rows(dx, width))


def cutout(images: jax.Array, cy: jax.Array, cx: jax.Array, size: int) -> jax.Array:
    """Zero one size x size square per image, centred at (cy, cx) (N,), clipped at the borders."""
    height, width = images.shape[1], images.shape[2]
    top, left = (cy - size // 2)[:, None, None], (cx - size // 2)[:, None, None]
    ys, xs = jnp.arange(height)[None, :, None], jnp.arange(width)[None, None, :]
    inside = (ys >= top) & (ys < top + size) & (xs >= left) & (xs < left + size)
    return images * (~inside)[..., None].astype(images.dtype)


def augment(images: jax.Array, key: jax.Array, options, flip_bits: jax.Array, epoch) -> jax.Array:
    """Every configured augmentation (``options``: the ``data.augment`` node) of one float batch (N, H, W, C).

    ``flip_bits`` (N,) are the images' fixed bits for the alternating flip; ``epoch`` its parity."""
    n, height, width = images.shape[0], images.shape[1], images.shape[2]
    keys = jax.random.split(key, 7)
    alternating = options.horizontal_flip and options.alternating_flip
    if options.horizontal_flip and not alternating:
        images = flip_where(images, jax.random.uniform(keys[0], (n,)) < 0.5)
    if options.width_shift or options.height_shift:
        dx = jax.random.uniform(keys[1], (n,), minval=-options.width_shift, maxval=options.width_shift) * width
        dy = jax.random.uniform(keys[2], (n,), minval=-options.height_shift, maxval=options.height_shift) * height
        images = shift_bilinear(images, dx, dy)
    if alternating:
        images = flip_where(images, flip_bits != (epoch % 2 == 1))
    if options.translate:
        dx = jax.random.randint(keys[3], (n,), -options.translate, options.translate + 1)
        dy = jax.random.randint(keys[4], (n,), -options.translate, options.translate + 1)
        images = translate_reflect(images, dx, dy)
    if options.cutout:
        cy = jax.random.randint(keys[5], (n,), 0, height)
        cx = jax.random.randint(keys[6], (n,), 0, width)
        images = cutout(images, cy, cx, options.cutout)
    return images
