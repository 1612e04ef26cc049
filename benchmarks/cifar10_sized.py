"""A CIFAR-10-sized data set made on the fly from the packaged sample, in CIFAR-10's own format: what a machine
without the network (a lent GPU machine) trains on to measure at CIFAR-10's scale.

50,000 training and 10,000 test images by default, in ``<out>/cifar-10-batches-py/`` as the real archive
unpacks (five ``data_batch_N`` pickles of a fifth each, ``test_batch``, ``batches.meta``), so that
``data=cifar10 data.path=<out>`` reads them through cifar_dist's real loader. Image ``i`` is the sample's image
``i % n`` moved by a shift of up to 4 pixels each way (wrapped: no blank border) and mirrored on every other
cycle through the sample, each cycle a new shift: a deterministic function of ``i``, so every run and every
machine builds the same bytes. The accuracy such a set reaches is not CIFAR-10's (it holds 4,068 pictures seen
~12 times); its images/s and wall time are.

    python -m benchmarks cifar10-sized /tmp/cifar10 [--train 50000] [--test 10000]
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

TRAIN_BATCHES = 5  # data_batch_1 ... data_batch_5, as the real archive has them
SHIFT = 4


def varied(images: np.ndarray, labels: np.ndarray, count: int, salt: int) -> tuple:
    """``count`` images from ``images`` (NHWC uint8): image i is images[i % n], shifted and mirrored by cycle."""
    n = len(images)
    index = np.arange(count)
    cycle = index // n
    rng = np.random.default_rng([salt, 0x51ED])
    shifts = rng.integers(-SHIFT, SHIFT + 1, size=(int(cycle.max()) + 1, 2))
    out = np.empty((count, *images.shape[1:]), np.uint8)
    for c in np.unique(cycle):
        rows = index[cycle == c]
        part = np.roll(images[rows % n], shift=tuple(shifts[c]), axis=(1, 2))
        out[rows] = part[:, :, ::-1] if c % 2 else part
    return out, labels[index % n]


def batch_bytes(images: np.ndarray, labels: np.ndarray, name: str) -> bytes:
    """One CIFAR-10 batch pickle: 3072-byte rows (the channel planes, row-major), labels, a name."""
    rows = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
    return pickle.dumps({b"batch_label": name.encode(), b"labels": [int(v) for v in labels], b"data": rows}, 2)


def write(out: Path, train: int, test: int) -> Path:
    """The set in ``out/cifar-10-batches-py``, built from the packaged sample; returns that folder."""
    from omegaconf import OmegaConf

    from cifar_dist.data import load_dataset

    sample = load_dataset(OmegaConf.create({"name": "sample"}))
    folder = out / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    x, y = varied(sample.x_train, np.asarray(sample.y_train), train, salt=1)
    per_batch = -(-train // TRAIN_BATCHES)
    for b in range(TRAIN_BATCHES):
        rows = slice(b * per_batch, (b + 1) * per_batch)
        (folder / f"data_batch_{b + 1}").write_bytes(batch_bytes(x[rows], y[rows], f"training batch {b + 1}"))
    tx, ty = varied(sample.x_test, np.asarray(sample.y_test), test, salt=2)
    (folder / "test_batch").write_bytes(batch_bytes(tx, ty, "testing batch 1 of 1"))
    meta = {b"label_names": [name.encode() for name in sample.class_names], b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, 2))
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write cifar-10-batches-py/ into (data.path)")
    parser.add_argument("--train", type=int, default=50_000)
    parser.add_argument("--test", type=int, default=10_000)
    args = parser.parse_args(argv)
    folder = write(args.out, args.train, args.test)
    print(f"wrote {args.train} training and {args.test} test images to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
