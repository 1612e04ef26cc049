"""``data=folder``: a class-per-subfolder image tree, streamed from disk.

``DIR/train/<class>/*.png`` and ``DIR/test/<class>/...`` (the same class
folders in both), or one tree ``DIR/<class>/...`` of which a fixed
``data.val_fraction`` of each class (chosen by ``data.split_seed``) is held
out for testing. Classes are the sorted folder names. Images (PNG, JPEG, BMP,
GIF) are decoded by Pillow and resized to ``data.image_size`` (``decode_file``,
the one decoder): on the TensorFlow engines each rank decodes its own shard as
training goes, only file names in memory (``load_folder_streams``); engine=jax
decodes them all once, into memory and onto the device (``load_folder_arrays``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import AbstractSet, Dict, List, Sequence, Tuple

import numpy as np

from cifar_dist.data.arrays import DataArrays
from cifar_dist.data.batches import DataError
from cifar_dist.data.checks import REFUSE, bad_images
from cifar_dist.data.sources import budget_words

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif"})

Files = List[Tuple[str, int]]  # (path, class index)


def image_files(folder: Path) -> List[Path]:
    """Every image file under ``folder``, sorted; hidden ones (``._x.png``, in ``.folder/``) are not images."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.suffix.lower() in IMAGE_SUFFIXES
        and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def scan_classes(root: Path, left_out: AbstractSet[Path] = frozenset()) -> Dict[str, List[Path]]:
    """Class name -> its images (but ``left_out``) for the sub-folders of ``root``; one-line DataError if unusable."""
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DataError(f"{root} has no class folders; put each class's images in {root}/<class name>/")
    found = {name: [f for f in image_files(root / name) if f not in left_out] for name in classes}
    empty = [name for name, files in found.items() if not files]
    if empty:
        raise DataError(
            f"class folder {root / empty[0]} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}); "
            "add images or remove the folder"
        )
    return found


def _labelled(found: Dict[str, List[Path]], class_names: Sequence[str]) -> Files:
    index = {name: i for i, name in enumerate(class_names)}
    return [(str(f), index[name]) for name, files in found.items() for f in files]


def split_tree(
    root: Path, val_fraction: float, split_seed: int, bad_files: str = REFUSE
) -> Tuple[Files, Files, Tuple[str, ...]]:
    """(train files, test files, class names) of DIR/train + DIR/test, or of one tree split by ``val_fraction``.

    Every image is read once first (``checks.bad_images``): an unreadable one is refused in one line, or left
    out with ``bad_files`` skip."""
    if not root.is_dir():
        raise DataError(
            f"data.path={root} is not a folder; point it at DIR holding train/<class>/ and test/<class>/ (or <class>/)"
        )
    if (root / "train").is_dir() or (root / "test").is_dir():
        if not ((root / "train").is_dir() and (root / "test").is_dir()):
            raise DataError(
                f"{root} has only one of train/ and test/; give both, or put the class folders directly in {root}"
            )
        bad = bad_images(image_files(root / "train") + image_files(root / "test"), bad_files)
        train, test = scan_classes(root / "train", bad), scan_classes(root / "test", bad)
        if list(train) != list(test):
            differ = sorted(set(train) ^ set(test))
            raise DataError(
                f"{root}/train and {root}/test have different class folders ({', '.join(differ)}); "
                "use the same names in both"
            )
        names = tuple(train)
        return _labelled(train, names), _labelled(test, names), names
    if not 0 < val_fraction < 1:
        raise DataError(
            f"data.val_fraction={val_fraction} must be in (0, 1) to split the single tree {root} into train and test"
        )
    found = scan_classes(root, bad_images(image_files(root), bad_files))
    names = tuple(found)
    rng = np.random.default_rng(split_seed)
    train_part, test_part = {}, {}
    for name, files in found.items():
        held = set(rng.permutation(len(files))[: max(1, round(val_fraction * len(files)))].tolist())
        if len(held) == len(files):
            raise DataError(
                f"class folder {root / name} has {len(files)} image(s), too few to hold out "
                f"data.val_fraction={val_fraction} for testing; add images or give train/ and test/ folders"
            )
        test_part[name] = [f for i, f in enumerate(files) if i in held]
        train_part[name] = [f for i, f in enumerate(files) if i not in held]
    return _labelled(train_part, names), _labelled(test_part, names), names


def folder_class_names(data_cfg) -> Tuple[str, ...]:
    """The class names of ``data=folder`` (its sorted class folders), without reading any image."""
    root = Path(str(data_cfg.path)).expanduser()
    return tuple(scan_classes(root / "train" if (root / "train").is_dir() else root))


def decode_file(path, image_size: int) -> np.ndarray:
    """One image file as uint8 ``image_size`` x ``image_size`` x 3 RGB: Pillow's decoder, and its bilinear resize
    (the identity when the size already matches). The one decoder of image files, for training on any engine and
    for evaluation alike."""
    from PIL import Image  # lazy: Pillow

    with Image.open(path) as im:
        rgb = im.convert("RGB")
        if rgb.size != (image_size, image_size):
            rgb = rgb.resize((image_size, image_size), Image.Resampling.BILINEAR)
        return np.asarray(rgb, np.uint8)


def decode_files(paths: Sequence[str], image_size: int) -> np.ndarray:
    """Many image files as one uint8 array (N, S, S, 3), decoded by a pool of threads (Pillow releases the GIL)."""
    out = np.empty((len(paths), image_size, image_size, 3), np.uint8)

    def one(i: int) -> None:
        out[i] = decode_file(paths[i], image_size)

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(one, range(len(paths))))
    return out


def decoder(image_size: int):
    """file path tensor -> float32 image_size x image_size x 3 in [0, 1], for tf.data: ``decode_file`` run by
    TensorFlow (the same pixels as every other reader of the folder), scaled as CIFAR's pixels are."""
    import tensorflow as tf  # lazy: TensorFlow

    def decode(path):
        pixels = tf.numpy_function(lambda p: decode_file(p.decode(), image_size), [path], tf.uint8, stateful=False)
        return tf.ensure_shape(tf.cast(pixels, tf.float32) / 255.0, [image_size, image_size, 3])

    return decode


def folder_split(data_cfg):
    """(train files, test files, class names, root) of ``data=folder``, every image checked once (one line, or left
    out with data.bad_files=skip)."""
    if not data_cfg.path:
        raise DataError("data=folder needs data.path=DIR (a folder of class sub-folders); see docs/data.md")
    if int(data_cfg.image_size) < 8:
        raise DataError(f"data.image_size={data_cfg.image_size} is too small; use 32 (CIFAR's size) or larger")
    root = Path(str(data_cfg.path)).expanduser()
    train, test, names = split_tree(root, float(data_cfg.val_fraction), int(data_cfg.split_seed), data_cfg.bad_files)
    return train, test, names, root


def load_folder_arrays(data_cfg, budget: int):
    """``DataArrays`` of the tree at ``data.path``: every image decoded into memory once (engine=jax keeps them on
    the device); refused in one line when they would take more than ``budget`` bytes
    (``sources.host_memory_budget``)."""
    train, test, names, root = folder_split(data_cfg)
    size = int(data_cfg.image_size)
    needed = (len(train) + len(test)) * size * size * 3
    if needed > budget:
        raise DataError(
            f"data=folder: the {len(train) + len(test)} images of {root} at data.image_size={size} take "
            f"{needed / 2**30:.1f} GiB decoded, more than {budget_words(budget)}; "
            "use a smaller data.image_size, or engine=tensorflow/horovod, which stream them from disk"
        )
    return DataArrays(
        decode_files([f for f, _ in train], size),
        np.asarray([c for _, c in train], np.int64),
        decode_files([f for f, _ in test], size),
        np.asarray([c for _, c in test], np.int64),
        names,
        f"image folder {root} ({len(names)} classes)",
    )


def load_folder_streams(data_cfg):
    """``DataStreams`` over the tree at ``data.path``: file names in the pipeline, pixels decoded per rank."""
    import tensorflow as tf  # lazy: TensorFlow

    from cifar_dist.data.streams import DataStreams  # lazy: TensorFlow

    train, test, names, root = folder_split(data_cfg)

    def dataset(files: Files) -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(([f for f, _ in files], np.asarray([c for _, c in files], np.int64)))

    return DataStreams(
        train=dataset(train),
        test=dataset(test),
        num_classes=len(names),
        class_names=names,
        decode=decoder(int(data_cfg.image_size)),
        train_size=len(train),
        test_size=len(test),
        source=f"image folder {root} ({len(names)} classes)",
    )
