"""Cheap checks of what a data set holds, done before any model sees it: one line naming the problem, not a
TensorFlow traceback mid-epoch (or a run that trains silently on wrong targets).

- ``bad_images``: every file of an image folder is decoded once (PIL; JPEGs at a reduced scale) before
  training; an unreadable one (corrupt, a text file named ``.png``) is refused in one line naming it, or
  skipped and counted (``data.bad_files=skip``). Hidden files (``._x.png`` of macOS, ``.DS_Store``) are
  never images: ``folder.image_files`` leaves them out, as it leaves out hidden folders.
- ``check_elements``: a data factory's first elements of each split (after ``decode``): unbatched
  HxWx3 images in [0, 1] with no NaN or infinite pixel (a NaN trains to NaN weights without a word),
  integer scalar labels in [0, num_classes). A stream is not read whole before training: its batches are
  checked for labels out of range, NaN and inf as they are read (``streams.checked_batch``).
- ``check_arrays``: a factory's arrays (and a stream read into memory for engine=jax or scoring) as a whole:
  shapes, dtypes, labels, no empty split, and every pixel of a float split (``pixels_problem``).
- ``check_same_on_every_rank``: every rank read the same sizes and classes (a factory must return the
  same elements on every rank; otherwise the ranks run different numbers of steps and stall).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, FrozenSet, Optional, Sequence

import numpy as np

from cifar_dist.data.batches import DataError, reason

log = logging.getLogger(__name__)

REFUSE, SKIP = "refuse", "skip"
FIRST_ELEMENTS = 256  # how many elements of each split check_elements reads
_RANGE_SLACK = 1e-3  # float images a hair outside [0, 1] (rounding) are fine


def unreadable(path: Path) -> Optional[str]:
    """Why ``path`` is not an image PIL (and so TensorFlow's decoders) can read, or None when it is."""
    from PIL import Image  # lazy: Pillow

    try:
        with Image.open(path) as im:
            im.draft("RGB", (32, 32))  # JPEG: decode at a reduced scale; a no-op for other formats
            im.load()
    except Exception as exc:  # PIL raises many types for a bad file; all mean "not an image"
        return reason(exc)
    return None


def bad_images(files: Sequence[Path], policy: str = REFUSE) -> FrozenSet[Path]:
    """The unreadable ones of ``files``, to leave out with ``policy`` skip; with refuse, one line naming the first."""
    bad = {f: why for f in files if (why := unreadable(f)) is not None}
    if not bad:
        return frozenset()
    first, why = next(iter(bad.items()))
    count = f"{len(bad)} image files cannot be read" if len(bad) > 1 else "an image file cannot be read"
    if str(getattr(policy, "value", policy)) != SKIP:
        raise DataError(
            f"{count}: {first} ({why}); remove or replace {'them' if len(bad) > 1 else 'it'}, "
            "or set data.bad_files=skip to leave them out"
        )
    log.warning(
        "%s and %s left out (data.bad_files=skip): %s",
        count,
        "are" if len(bad) > 1 else "is",
        ", ".join(str(f) for f in list(bad)[:5]) + (", ..." if len(bad) > 5 else ""),
    )
    return frozenset(bad)


def _element_problem(image: np.ndarray, label: np.ndarray, num_classes: int, index: int = 0) -> Optional[str]:
    """What is wrong with one (decoded image, label) element of a factory's dataset (the ``index``-th), or None."""
    if image.ndim == 4:
        return (
            f"yields batches (images of shape {image.shape}); "
            "return unbatched elements (drop .batch() or add .unbatch())"
        )
    if image.ndim != 3 or image.shape[-1] != 3:
        return f"yields images of shape {image.shape}, not HxWx3; give every image 3 channels (RGB)"
    if label.ndim == 1 and label.shape[0] == num_classes:
        return f"yields one-hot labels (shape {label.shape}); yield the class index instead (tf.argmax(label))"
    if label.ndim != 0:
        return f"yields labels of shape {label.shape}; yield one integer class index per image"
    if not np.issubdtype(label.dtype, np.integer):
        return f"yields {label.dtype} labels (e.g. {label.item()}); yield integer class indices (cast them to int64)"
    if not 0 <= int(label) < num_classes:
        return label_out_of_range(int(label), num_classes)
    if np.issubdtype(image.dtype, np.floating) and not np.isfinite(image).all():  # min/max would not see a NaN
        return non_finite_element(index)
    low, high = float(image.min()), float(image.max())
    if low < -_RANGE_SLACK or high > 1 + _RANGE_SLACK:
        return f"yields float images with values in [{low:.3g}, {high:.3g}], not [0, 1]; " + (
            "divide them by 255 (or yield uint8)" if high > 1.5 else "scale them to [0, 1]"
        )
    return None


def label_out_of_range(label: int, num_classes: int, index: Optional[int] = None) -> str:
    """The problem of a stream's element (the ``index``-th, where known) whose label is not a class index (found
    before training among the first elements, or in a batch as it is read: ``streams.checked_batch``)."""
    element = "" if index is None else f" (element {index})"
    return (
        f"yields label {label}{element}, outside [0, {num_classes}) for num_classes={num_classes}; "
        f"number the classes 0..{num_classes - 1}"
    )


def non_finite_element(index: int) -> str:
    """The problem of a stream's element ``index`` that holds a NaN or infinite pixel (found before training
    among the first elements, or in a batch as it is read: ``streams.checked_batch``)."""
    return f"yields an image with NaN or infinite pixels (element {index}); replace or drop them"


def check_elements(streams, where: str, count: int = FIRST_ELEMENTS) -> None:
    """The first ``count`` elements of ``streams.train`` and ``.test`` (decoded) obey the factory contract."""
    import tensorflow as tf  # lazy: TensorFlow

    decode = streams.decode or (lambda x: x)
    for split, dataset in (("train", streams.train), ("test", streams.test)):
        dtype = dataset.map(lambda x, y: (decode(x), y)).element_spec[0].dtype  # known without reading an element
        if not (dtype.is_floating or dtype in (tf.uint8, tf.uint16)):  # other integers would be scaled by their max
            raise DataError(
                f"the {split} dataset of {where} yields {dtype.name} images; yield uint8 (0-255) or "
                "float images in [0, 1] (docs/data.md)"
            )
        for index, (image, label) in enumerate(streams.images(dataset.take(count))):
            problem = _element_problem(image.numpy(), label.numpy(), int(streams.num_classes), index)
            if problem:
                raise DataError(f"the {split} dataset of {where} {problem} (docs/data.md)")


def check_arrays(data, where: str) -> None:
    """A factory's ``DataArrays`` obey the contract a CIFAR set does: (N, H, W, 3) uint8 or [0, 1] float images of
    one size in both splits, one integer label in [0, num_classes) per image, no empty split; every pixel of a
    float split is looked at (``pixels_problem``), not only the first images as in a stream."""
    for split in ("train", "test"):
        images, labels = np.asarray(getattr(data, f"x_{split}")), np.asarray(getattr(data, f"y_{split}"))
        problem = _split_problem(images, labels, data.image_shape, int(data.num_classes))
        if problem is None and not len(labels):
            problem = f"hold no images; {empty_split(split)}"
        problem = problem or pixels_problem(images)
        if problem:
            raise DataError(f"the {split} arrays of {where} {problem} (docs/data.md)")


def empty_split(split: str) -> str:
    """What an empty ``split`` means for a run, and what to do: the end of the one line that refuses it."""
    if split == "train":
        return "there is nothing to train on: check what the factory reads"
    return (
        "the test split is what every epoch is validated on and the run is scored on: give the factory one "
        "(hold out a part of the images, as data=folder's data.val_fraction does)"
    )


PIXEL_CHUNK = 4096  # images per pass of pixels_problem: a bad chunk's per-image look stays small


def pixels_problem(images: np.ndarray) -> Optional[str]:
    """What is wrong with the pixels of a whole split of float images (NaN, inf, values outside [0, 1]), naming
    the first bad image, or None (uint8 pixels always fit). A chunk's min and max see a NaN (they become NaN) and
    allocate nothing; only a bad chunk is looked at image by image (50,000 32x32x3 float32 images: 0.04 s)."""
    if not np.issubdtype(images.dtype, np.floating):
        return None
    for start in range(0, len(images), PIXEL_CHUNK):
        chunk = images[start : start + PIXEL_CHUNK]
        low, high = float(chunk.min()), float(chunk.max())
        if -_RANGE_SLACK <= low and high <= 1 + _RANGE_SLACK:  # False for a NaN
            continue
        pixels = chunk.reshape(len(chunk), -1)
        finite = np.isfinite(pixels).all(axis=1)
        if not finite.all():
            first = start + int(np.argmin(finite))
            return f"hold NaN or infinite pixels (image {first} is the first); replace or drop those images"
        lows, highs = pixels.min(axis=1), pixels.max(axis=1)
        first = int(np.argmax((lows < -_RANGE_SLACK) | (highs > 1 + _RANGE_SLACK)))
        return f"hold float images with values outside [0, 1] (image {start + first}: [{lows[first]:.3g}, " + (
            f"{highs[first]:.3g}]); " + ("divide them by 255 (or give uint8)" if high > 1.5 else "scale them to [0, 1]")
        )
    return None


def _split_problem(images: np.ndarray, labels: np.ndarray, shape: tuple, num_classes: int) -> Optional[str]:
    """What is wrong with one split's arrays as a whole (shapes, dtypes, label range), or None."""
    if images.ndim != 4 or images.shape[-1] != 3:
        return f"hold images of shape {images.shape}, not (N, H, W, 3)"
    if tuple(images.shape[1:]) != tuple(shape):
        return f"hold {images.shape[1:]} images, the train split {tuple(shape)}; give both splits one size"
    if not (images.dtype == np.uint8 or np.issubdtype(images.dtype, np.floating)):
        return f"hold {images.dtype} images; give uint8 (0-255) or float images in [0, 1]"
    if labels.ndim != 1 or len(labels) != len(images):
        return f"hold {len(images)} images but labels of shape {labels.shape}; give one class index per image"
    if not np.issubdtype(labels.dtype, np.integer):
        return f"hold {labels.dtype} labels; give integer class indices"
    if len(labels) and not (0 <= int(labels.min()) and int(labels.max()) < num_classes):
        return f"hold labels in [{labels.min()}, {labels.max()}], outside [0, {num_classes}) for {num_classes} classes"
    return None


def check_same_on_every_rank(data, allgather: Callable[[object], Sequence[object]]) -> None:
    """One line on every rank when the ranks did not read the same data (sizes, classes): named, not a stall."""
    same_on_every_rank(
        f"{data.train_size} train / {data.test_size} test images, {len(data.class_names)} classes",
        tuple(data.class_names),
        data.source,
        allgather,
    )


def same_on_every_rank(
    summary: str, class_names: Sequence[str], source: str, allgather: Callable[[object], Sequence[object]]
) -> None:
    """``summary`` (what this rank read) and ``class_names`` gathered from every rank; one line when they differ."""
    seen = list(allgather((summary, tuple(class_names))))
    if all(s == seen[0] for s in seen):
        return
    parts = "; ".join(f"rank {r}: {s}" for r, (s, _) in enumerate(seen))
    raise DataError(
        f"the ranks read different data ({parts}); {source} must give every rank the same "
        "elements in the same order (seed it with the seed it is given, not the rank)"
    )
