"""The CIFAR-10 python batch format: safe decoding and validation.

``cifar-10-python.tar.gz`` holds, under ``cifar-10-batches-py/``, pickles of
dicts with bytes keys: ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``
(``data``: uint8 (N, 3072), each row 1024 red, 1024 green, 1024 blue values
of a 32x32 image; ``labels``: N ints in [0, 10)) and ``batches.meta``
(``label_names``). Unpickling runs code chosen by whoever wrote the file, and
these files come from the network or from wherever ``data.path`` points, so
they are read with an unpickler that can build nothing but a numpy array,
after a scan that refuses oversized memo indices (a cheap way to make the C
unpickler allocate gigabytes). Every problem becomes a one-line DataError
that names the file and says how to fix it.
"""

from __future__ import annotations

import codecs
import io
import math
import os
import pickle
import pickletools
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from cifar_dist.common.errors import CifarDistError
from cifar_dist.data.arrays import DataArrays

CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"  # the only data set with a packaged sample (data=sample)
BATCH_DIR = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
META = "batches.meta"
MEMBERS = (META, *TRAIN_BATCHES, TEST_BATCH)

NUM_CLASSES = 10
IMAGE_SHAPE = (32, 32, 3)
ROW_LENGTH = 32 * 32 * 3

# The largest memo index a real batch uses is ~10,030 (one per label); a
# pickle asking for more is not a CIFAR batch.
_MAX_MEMO_INDEX = 1_000_000
# A real batch file is 31 MB (10,000 images). Neither a file, nor a tarball
# member, nor all the arrays and byte strings one pickle builds may exceed
# this: a few kilobytes of pickle can otherwise ask for terabytes.
MAX_BATCH_BYTES = 64 << 20


@dataclass(frozen=True)
class Layout:
    """Where one python-pickle CIFAR archive keeps its files and which keys hold what.

    CIFAR-10 and CIFAR-100 share the format (dicts of ``data`` rows and label
    lists) but differ in folder, file names, label key and class count.
    """

    name: str  # for messages: "CIFAR-10"
    archive: str  # the .tar.gz name
    folder: str  # the folder inside it
    train: tuple[str, ...]  # training batch files (those present are used)
    test: str
    meta: str
    labels_key: bytes
    names_key: bytes
    num_classes: int
    max_bytes: int  # the largest batch file a real copy holds, with room to spare

    @property
    def members(self) -> tuple[str, ...]:
        return (self.meta, *self.train, self.test)

    @property
    def offline_hint(self) -> str:
        """What to do without the network: a copy of this data set's own archive (or, for CIFAR-10, the sample)."""
        hint = f"point data.path at a copy of {self.archive}"
        return f"{hint} or use data=sample" if self.archive == CIFAR10_ARCHIVE else hint


CIFAR10 = Layout(
    "CIFAR-10",
    CIFAR10_ARCHIVE,
    BATCH_DIR,
    TRAIN_BATCHES,
    TEST_BATCH,
    META,
    b"labels",
    b"label_names",
    NUM_CLASSES,
    MAX_BATCH_BYTES,
)


def cifar100_layout(label_mode: str) -> Layout:
    """CIFAR-100 (``cifar-100-python/train``, ``test``, ``meta``) with its 100 fine or 20 coarse labels."""
    fine = label_mode == "fine"
    return Layout(
        "CIFAR-100",
        "cifar-100-python.tar.gz",
        "cifar-100-python",
        ("train",),
        "test",
        "meta",
        b"fine_labels" if fine else b"coarse_labels",
        b"fine_label_names" if fine else b"coarse_label_names",
        100 if fine else 20,
        192 << 20,
    )  # its train file is 155 MB (50,000 images)


class DataError(CifarDistError):
    """The data set cannot be read; the one-line message names the file or URL and says what to do."""


# The in-memory data set every CIFAR archive is read into: ``arrays.DataArrays`` (its name before it served
# every data set).
CifarArrays = DataArrays


def reason(exc: object) -> str:
    """The first line of an exception's message (its type name when empty), for one-line errors."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text or type(exc).__name__


def _plain_dtype(*args):
    """``numpy.dtype`` limited to dtypes without Python objects inside."""
    dtype = np.dtype(*args)
    if dtype.hasobject:
        raise pickle.UnpicklingError("object dtypes are not allowed")
    return dtype


_reconstruct = np.empty(0).__reduce__()[0]


class RestrictedUnpickler(pickle.Unpickler):
    """Builds numpy arrays and nothing else, and at most ``budget`` bytes of them in all.

    ``find_class`` resolves only what a pickled numpy array needs; anything
    else stops unpickling before it runs. The original files were written by
    numpy 1.x under Python 2 (``numpy.core.multiarray._reconstruct``); numpy
    under Python 3 writes ``numpy._core`` names, ``_codecs.encode`` for bytes
    (protocols 2-4) or ``_frombuffer`` (protocol 5). Every allocation those
    functions make is counted against the budget before it is made.
    """

    def __init__(self, file, budget: int = MAX_BATCH_BYTES, **kwargs):
        super().__init__(file, **kwargs)
        self.budget = int(budget)
        self._allowed: Mapping[tuple[str, str], Callable] = {
            ("numpy.core.multiarray", "_reconstruct"): self._reconstruct,
            ("numpy._core.multiarray", "_reconstruct"): self._reconstruct,
            ("numpy.core.numeric", "_frombuffer"): self._frombuffer,
            ("numpy._core.numeric", "_frombuffer"): self._frombuffer,
            ("numpy", "ndarray"): self._ndarray,
            ("numpy", "dtype"): _plain_dtype,
            ("_codecs", "encode"): self._latin1_encode,
        }

    def find_class(self, module, name):
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}") from None

    def _charge(self, nbytes: int, what: str) -> None:
        if nbytes > self.budget:
            raise pickle.UnpicklingError(
                f"{what} would need {nbytes} bytes, more than a CIFAR-10 batch ({MAX_BATCH_BYTES})"
            )
        self.budget -= nbytes

    def _array_bytes(self, shape, dtype) -> int:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise pickle.UnpicklingError(f"bad array shape {shape!r}")
        return math.prod(shape) * _plain_dtype(dtype).itemsize

    def _reconstruct(self, subtype, shape, dtype):
        if subtype != self._ndarray:  # the pickle's numpy.ndarray, as find_class resolved it
            raise pickle.UnpicklingError("only plain numpy arrays are allowed")
        self._charge(self._array_bytes(shape, dtype), "an array")
        return _reconstruct(np.ndarray, shape, dtype)

    def _ndarray(self, shape, dtype=float, *args):
        if args:  # buffer, offset, strides, order: only the plain constructor is needed
            raise pickle.UnpicklingError("numpy.ndarray with a buffer is not allowed")
        self._charge(self._array_bytes(shape, dtype), "an array")
        return np.ndarray(shape, _plain_dtype(dtype))

    def _frombuffer(self, buffer, dtype, shape, order):
        """numpy's protocol-5 form: a view on bytes the pickle itself holds (reshaped, never grown)."""
        data = memoryview(buffer)
        self._charge(data.nbytes, "an array")
        return np.frombuffer(data, dtype=_plain_dtype(dtype)).reshape(shape, order=order)

    def _latin1_encode(self, text, encoding):
        """``_codecs.encode`` as Python 3 pickles use it for bytes, and no other codec."""
        if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
            raise pickle.UnpicklingError(f"_codecs.encode({type(text).__name__}, {encoding!r}) is not allowed")
        self._charge(len(text), "a byte string")
        return codecs.encode(text, "latin1")


def _scan(raw: bytes, max_bytes: int = MAX_BATCH_BYTES) -> None:
    """Walk the opcodes without executing any, refusing memo indices no batch needs."""
    if len(raw) > max_bytes:
        raise pickle.UnpicklingError(f"{len(raw)} bytes is far more than a CIFAR-10 batch")
    for op, arg, _ in pickletools.genops(raw):
        if op.name in ("BINPUT", "LONG_BINPUT", "PUT", "BINGET", "LONG_BINGET", "GET"):
            if int(arg) > _MAX_MEMO_INDEX:
                raise pickle.UnpicklingError(f"memo index {arg} is too large")


def unpickle(raw: bytes, where: str, fix: str, max_bytes: int = MAX_BATCH_BYTES) -> object:
    """Decode one batch file's bytes with the restricted unpickler; any failure is a DataError."""
    try:
        _scan(raw, max_bytes)
        return RestrictedUnpickler(io.BytesIO(raw), budget=max_bytes, encoding="bytes").load()
    except Exception as exc:  # garbage can fail in any of a dozen ways; all mean "not a CIFAR batch"
        raise DataError(f"{where} is not a readable CIFAR-10 batch ({reason(exc)}); {fix}") from None


def _field(batch: object, key: bytes, where: str, fix: str):
    if not isinstance(batch, dict):
        raise DataError(f"{where} holds a {type(batch).__name__}, not a CIFAR-10 batch dict; {fix}")
    if key not in batch and key.decode() not in batch:
        raise DataError(f"{where} has no {key.decode()!r} entry; {fix}")
    return batch[key] if key in batch else batch[key.decode()]


def decode_images(batch: object, where: str, fix: str, layout: Layout = CIFAR10) -> tuple[np.ndarray, np.ndarray]:
    """A data or test batch as (uint8 NHWC images, int64 labels), after checking shapes, dtypes and labels."""
    data = _field(batch, b"data", where, fix)
    labels = _field(batch, layout.labels_key, where, fix)
    if type(data) is not np.ndarray or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != ROW_LENGTH:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{where}: 'data' is {got}, expected uint8 (N, {ROW_LENGTH}); {fix}")
    n = data.shape[0]
    if n == 0:
        raise DataError(f"{where} holds no images; {fix}")
    if isinstance(labels, np.ndarray):
        ok = labels.ndim == 1 and np.issubdtype(labels.dtype, np.integer)
        labels = labels.tolist() if ok else None
    elif isinstance(labels, (list, tuple)) and all(type(v) is int for v in labels):
        labels = list(labels)
    else:
        labels = None
    if labels is None:
        raise DataError(f"{where}: 'labels' is not a list of ints; {fix}")
    if len(labels) != n:
        raise DataError(f"{where} has {n} images but {len(labels)} labels; {fix}")
    bad = [v for v in labels if not 0 <= v < layout.num_classes]
    if bad:
        raise DataError(f"{where} has label {bad[0]} outside [0, {layout.num_classes}); {fix}")
    # Rows are channel-planar (1024 R, 1024 G, 1024 B): NCHW, then NHWC as Keras expects.
    images = np.ascontiguousarray(data.reshape(n, 3, 32, 32).transpose(0, 2, 3, 1))
    return images, np.asarray(labels, dtype=np.int64)


def decode_class_names(meta: object, where: str, fix: str, layout: Layout = CIFAR10) -> tuple[str, ...]:
    """``label_names`` from batches.meta (CIFAR-100: ``fine_label_names`` / ``coarse_label_names`` from meta)."""
    names = _field(meta, layout.names_key, where, fix)
    count, key = layout.num_classes, layout.names_key.decode()
    if (
        not isinstance(names, (list, tuple))
        or len(names) != count
        or not all(isinstance(v, (bytes, str)) for v in names)
    ):
        raise DataError(f"{where}: '{key}' is not a list of {count} names; {fix}")
    try:
        return tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in names)
    except UnicodeDecodeError:
        raise DataError(f"{where}: 'label_names' are not text; {fix}") from None


def read_images(raw: bytes, where: str, fix: str, layout: Layout = CIFAR10) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of a data/test batch file to (images, labels)."""
    return decode_images(unpickle(raw, where, fix, layout.max_bytes), where, fix, layout)


def read_batch_file(
    path, fix: str = "check that it is a batch file of cifar-10-python.tar.gz"
) -> tuple[np.ndarray, np.ndarray]:
    """One data/test batch file on disk to (uint8 NHWC images, int64 labels), read as safely as the archives."""
    return read_images(read_bounded(path, fix), str(path), fix)


def read_bounded(path, fix: str, layout: Layout = CIFAR10) -> bytes:
    """The bytes of one batch file, refused unread when it is larger than any batch of ``layout``."""
    max_bytes, kind = layout.max_bytes, layout.name
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise DataError(f"{path} is {size} bytes, far more than a {kind} batch ({max_bytes}); {fix}")
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        raise DataError(f"cannot read {path} ({reason(exc)}); {fix}") from None
    if len(raw) > max_bytes:  # it grew while being read
        raise DataError(f"{path} is larger than any {kind} batch ({max_bytes} bytes); {fix}")
    return raw


def assemble(
    read: Callable[[str], bytes | None], where: Callable[[str], str], source: str, fix: str, layout: Layout = CIFAR10
) -> CifarArrays:
    """All batches of one copy of the data set, as CifarArrays.

    ``read(member)`` returns the bytes of ``cifar-10-batches-py/<member>`` or
    None when the copy lacks it; ``where(member)`` names it in errors. Train
    data is every data_batch_1..5 present (the packaged sample has 1..4).
    """

    def required(member: str) -> bytes:
        raw = read(member)
        if raw is None:
            raise DataError(f"{where(member)} is missing; {fix}")
        return raw

    meta = layout.meta
    class_names = decode_class_names(
        unpickle(required(meta), where(meta), fix, layout.max_bytes), where(meta), fix, layout
    )
    train = []
    for member in layout.train:
        raw = read(member)
        if raw is not None:
            train.append(read_images(raw, where(member), fix, layout))
    if not train:
        raise DataError(f"{where(layout.train[0])} is missing (no training batch at all); {fix}")
    x_test, y_test = read_images(required(layout.test), where(layout.test), fix, layout)
    return CifarArrays(
        x_train=np.concatenate([x for x, _ in train]),
        y_train=np.concatenate([y for _, y in train]),
        x_test=x_test,
        y_test=y_test,
        class_names=class_names,
        source=source,
    )
