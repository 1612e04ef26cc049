"""Input sizes are not trusted: no batch file and no array a pickle builds may exceed a real batch's size.

A few kilobytes of pickle can declare a terabyte array (``numpy.ndarray``,
``_reconstruct``) or repeat one large string's encoding thousands of times;
a huge file in a data folder must be refused without being read. And valid
batches that numpy pickles with protocols 3-5 load (they used to be refused
with a message about a numpy function, not about the protocol).
"""

import pickle

import numpy as np
import pytest

from cifar_dist.data import DataError
from cifar_dist.data.archive import load_folder
from cifar_dist.data.batches import MAX_BATCH_BYTES, read_batch_file, read_images, unpickle
from helpers.cifar_fixtures import batch_files, random_batches, write_folder

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]  # also run on the current and jax stacks (Makefile)

FIX = "point data.path at a good copy"


class _Calls:
    """Pickles as ``func(*args)``: how a hostile file asks the unpickler to allocate."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


_reconstruct = np.empty(0).__reduce__()[0]


@pytest.mark.parametrize(
    "declared",
    [
        _Calls(np.ndarray, (1 << 20, 1 << 20), np.dtype("u1")),  # a terabyte, uninitialized
        _Calls(_reconstruct, np.ndarray, (1 << 40,), b"b"),
        _Calls(np.ndarray, (1 << 16,), np.dtype(("u1", (1 << 16,)))),  # small shape, huge sub-array dtype
    ],
    ids=["ndarray", "_reconstruct", "subarray-dtype"],
)
def test_a_small_pickle_declaring_a_huge_array_is_refused_before_allocating(declared):
    raw = pickle.dumps({b"data": declared, b"labels": [0]}, protocol=2)
    assert len(raw) < 1000
    with pytest.raises(DataError) as err:
        read_images(raw, "tiny_batch", FIX)
    text = str(err.value)
    assert "\n" not in text and "tiny_batch" in text and "more than a CIFAR-10 batch" in text


def test_one_string_encoded_over_and_over_is_refused():
    """Memo references let a pickle call _codecs.encode on one large string again and again, ~17 bytes a call."""
    big = b"x" * (8 << 20)
    raw = (
        b"\x80\x02X"
        + len(big).to_bytes(4, "little")
        + big
        + b"q\x000"  # the string, memo 0
        + b"c_codecs\nencode\nq\x010"  # the function, memo 1
        + b"("
        + b"h\x01h\x00X\x06\x00\x00\x00latin1\x86R" * 20
        + b"l."
    )  # [encode(memo 0, "latin1")] * 20
    assert len(raw) < (9 << 20)  # 160 MiB of bytes from a file of 8 MiB
    with pytest.raises(DataError, match="more than a CIFAR-10 batch"):
        unpickle(raw, "repeated", FIX)


def test_a_huge_file_in_a_data_folder_is_refused_unread(tmp_path):
    train, test = random_batches(1, 10, n_test=10)
    folder = write_folder(tmp_path / "cifar-10-batches-py", batch_files(train, test))
    with open(folder / "data_batch_2", "wb") as f:  # sparse: costs no disk
        f.truncate(MAX_BATCH_BYTES + 1)
    with pytest.raises(DataError) as err:
        load_folder(folder, FIX)
    assert "data_batch_2" in str(err.value) and "far more than a CIFAR-10 batch" in str(err.value)
    with pytest.raises(DataError, match="far more than a CIFAR-10 batch"):
        read_batch_file(folder / "data_batch_2", FIX)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_valid_batches_of_every_protocol_numpy_writes_load(protocol):
    ((x, y),) = random_batches(1, 10, n_test=10)[0]
    rows = np.ascontiguousarray(x.transpose(0, 3, 1, 2)).reshape(len(x), -1)
    raw = pickle.dumps({b"batch_label": b"b", b"labels": [int(v) for v in y], b"data": rows}, protocol=protocol)
    images, labels = read_images(raw, "batch", FIX)
    assert np.array_equal(images, x) and np.array_equal(labels, y)
