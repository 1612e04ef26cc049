"""The batch reader: refuses code in pickles, validates every field, fails only with one-line DataErrors."""

import builtins
import os
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cifar_dist.data import DataError
from cifar_dist.data.batches import read_batch_file, read_images, unpickle
from helpers.cifar_fixtures import batch_bytes, batch_files, random_batches, write_folder

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]  # also run on the current and jax stacks (Makefile)

FIX = "point data.path at a good copy"


class _RunsShell:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _RunsExec:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",)


def _one_line(exc: DataError) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("payload", [_RunsShell, _RunsExec], ids=["os.system", "builtins.exec"])
def test_a_pickle_that_runs_code_is_refused_without_running_it(tmp_path, payload):
    marker = tmp_path / "pwned"
    x, y = random_batches(1, 10, n_test=10)[1]
    raw = pickle.dumps({b"data": x.reshape(10, -1), b"labels": list(y), b"evil": payload(marker)}, protocol=2)
    assert not marker.exists()
    with pytest.raises(DataError) as err:
        read_images(raw, "evil_batch", FIX)
    text = _one_line(err.value)
    assert "evil_batch" in text and "refusing to load" in text and FIX in text
    assert not marker.exists()


@pytest.mark.parametrize(
    "module, name", [("numpy", "load"), ("numpy.core.multiarray", "scalar"), ("builtins", "eval"), ("posix", "system")]
)
def test_only_the_globals_an_array_needs_are_resolved(module, name):
    raw = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"."
    with pytest.raises(DataError, match=f"refusing to load {module}.{name}"):
        unpickle(raw, "b", FIX)


def test_codecs_encode_is_limited_to_latin1():
    raw = pickle.dumps(b"x", protocol=2).replace(b"latin1", b"rot_13")
    with pytest.raises(DataError, match="not allowed"):
        unpickle(raw, "b", FIX)


def test_object_arrays_are_refused():
    raw = pickle.dumps({b"data": np.array([None], dtype=object), b"labels": [0]}, protocol=2)
    with pytest.raises(DataError, match="object dtypes"):
        unpickle(raw, "b", FIX)


def test_a_huge_memo_index_is_refused_before_unpickling():
    raw = b"\x80\x02N" + b"r" + (2**31).to_bytes(4, "little") + b"."  # push None, LONG_BINPUT 2**31
    with pytest.raises(DataError, match="memo index"):
        unpickle(raw, "b", FIX)


def _batch(protocol=2, **fields):
    x, y = random_batches(1, 12, n_test=12)[1]
    batch = {
        b"batch_label": b"t",
        b"labels": [int(v) for v in y],
        b"data": x.transpose(0, 3, 1, 2).reshape(12, -1).copy(),
    }
    batch.update({key.encode(): value for key, value in fields.items()})
    return pickle.dumps({k: v for k, v in batch.items() if v is not None}, protocol=protocol)


@pytest.mark.parametrize(
    "raw, message",
    [
        (_batch(data=np.zeros((12, 3071), np.uint8)), r"'data' is uint8 \(12, 3071\), expected uint8 \(N, 3072\)"),
        (_batch(data=np.zeros((12, 3072), np.float32)), r"'data' is float32"),
        (_batch(data=np.zeros((12, 32, 32, 3), np.uint8)), r"'data' is uint8 \(12, 32, 32, 3\)"),
        (_batch(data=[1, 2, 3]), r"'data' is list"),
        # protocol 3: protocol 2 pickles b"" as builtins.bytes(), which the reader (rightly) refuses
        (_batch(3, data=np.zeros((0, 3072), np.uint8), labels=[]), "holds no images"),
        (_batch(labels=[0] * 11), "12 images but 11 labels"),
        (_batch(labels=[0] * 11 + [10]), "label 10 outside"),
        (_batch(labels=[-1] + [0] * 11), "label -1 outside"),
        (_batch(labels=[0.5] * 12), "not a list of ints"),
        (_batch(labels=[True] * 12), "not a list of ints"),
        (_batch(labels=None), "no 'labels' entry"),
        (_batch(data=None), "no 'data' entry"),
        (pickle.dumps([1, 2], protocol=2), "holds a list"),
        (_batch()[:5000], "not a readable CIFAR-10 batch"),
        (b"", "not a readable CIFAR-10 batch"),
    ],
    ids=[
        "short-rows",
        "float",
        "nhwc",
        "not-array",
        "empty",
        "label-count",
        "label-10",
        "label-neg",
        "float-labels",
        "bool-labels",
        "no-labels",
        "no-data",
        "not-dict",
        "truncated",
        "empty-file",
    ],
)
def test_bad_batches_are_one_line_errors_naming_the_file(raw, message):
    with pytest.raises(DataError, match=message) as err:
        read_images(raw, "/data/cifar-10-batches-py/data_batch_3", FIX)
    text = _one_line(err.value)
    assert text.startswith("/data/cifar-10-batches-py/data_batch_3") and text.endswith(FIX)


def test_a_truncated_batch_file_under_data_path_names_the_file_and_the_fix(tmp_path):
    from omegaconf import OmegaConf

    from cifar_dist.data import load_dataset

    folder = write_folder(tmp_path / "cifar-10-batches-py", batch_files(*random_batches()))
    raw = (folder / "data_batch_2").read_bytes()
    (folder / "data_batch_2").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError) as err:
        load_dataset(OmegaConf.create({"name": "cifar10", "path": str(tmp_path)}))
    text = _one_line(err.value)
    assert str(folder / "data_batch_2") in text and "data.path" in text


def test_read_batch_file_reads_one_file_and_names_it_when_bad(tmp_path):
    [(x, y)], _ = random_batches(1, 11)
    good, bad = tmp_path / "data_batch_1", tmp_path / "photo.jpg"
    good.write_bytes(batch_bytes(x, y))
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a pickle")
    images, labels = read_batch_file(good)
    assert np.array_equal(images, x) and np.array_equal(labels, y)
    with pytest.raises(DataError, match=f"^{bad} is not a readable CIFAR-10 batch"):
        read_batch_file(bad)
    with pytest.raises(DataError, match="cannot read"):
        read_batch_file(tmp_path / "absent")


@st.composite
def _valid_batches(draw):
    n = draw(st.integers(1, 12))
    labels = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    seed = draw(st.integers(0, 2**32 - 1))
    images = np.random.default_rng(seed).integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    return images, labels


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_valid_batches())
def test_any_valid_batch_round_trips(batch):
    images, labels = batch
    x, y = read_images(batch_bytes(images, labels), "b", FIX)
    assert x.dtype == np.uint8 and y.dtype == np.int64
    assert np.array_equal(x, images) and y.tolist() == labels


def _only_data_error(raw: bytes) -> None:
    try:
        x, y = read_images(raw, "garbage", FIX)
    except DataError as exc:
        _one_line(exc)
    else:  # rarely, a mutation still leaves a valid batch
        assert x.shape[1:] == (32, 32, 3) and len(x) == len(y)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_raise_nothing_but_data_error(raw):
    _only_data_error(raw)


_VALID = batch_bytes(np.zeros((2, 32, 32, 3), np.uint8), [3, 7])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(1, len(_VALID)),
)
def test_mutated_valid_batches_raise_nothing_but_data_error(edits, keep):
    raw = bytearray(_VALID)
    for position, value in edits:
        raw[position] = value
    _only_data_error(bytes(raw[:keep]))
