"""``DataArrays``: a data set held in memory as numpy arrays, what every engine can train on.

CIFAR-10/100 and the packaged sample are read into it (``batches.py``); a
``data=custom`` factory may return one (``custom.py``), or sources it is read
from (``sources.py``); engine=jax reads ``data=folder`` into it too
(``folder.py``). Images are uint8 (0-255) or float in [0, 1], NHWC with three
channels; labels are integer class indices. Nothing here imports a framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class DataArrays:
    """A whole data set in memory: train and test images (N, H, W, 3) and their integer labels (N,)."""

    x_train: np.ndarray  # uint8 (0-255) or float (0-1), NHWC
    y_train: np.ndarray  # integer class indices
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: Sequence[str] = ()  # default: "0", "1", ... (as many as the labels need)
    source: str = "arrays from a data factory"  # where it was read from, for logs and metrics

    def __post_init__(self):
        names = tuple(self.class_names) or tuple(str(i) for i in range(_classes_in(self.y_train, self.y_test)))
        object.__setattr__(self, "class_names", names)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def image_shape(self) -> tuple:
        return tuple(self.x_train.shape[1:])

    @property
    def train_size(self) -> int:
        return len(self.x_train)

    @property
    def test_size(self) -> int:
        return len(self.x_test)

    def fit_images(self, n: int) -> np.ndarray:
        """Up to n training images as float32 in [0, 1] (for layers fitted to the data)."""
        return as_float(self.x_train[:n])


def as_float(images: np.ndarray) -> np.ndarray:
    """Images as float32 in [0, 1]: uint8 pixels divided by 255 (as the seed did), float images as they are.

    Divided in place: the same float32 values as ``images.astype(np.float32) / 255.0`` without its second array
    (for the sample's 4,068 training images, 50 MB the allocator fetched and faulted in afresh: 0.04-0.12 s
    against 0.006 s)."""
    floats = images.astype(np.float32)
    if images.dtype == np.uint8:
        floats /= np.float32(255.0)
    return floats


def _classes_in(*labels: np.ndarray) -> int:
    found = [int(np.max(y)) + 1 for y in labels if len(y)]
    return max(found) if found else 0
