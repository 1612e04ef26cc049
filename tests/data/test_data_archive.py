"""data.path in its three forms, and archives that try to write outside the cache or smuggle links."""

import tarfile

import numpy as np
import pytest
from omegaconf import OmegaConf

from cifar_dist.data import DataError, load_dataset
from helpers.cifar_fixtures import batch_files, download_cfg, member, random_batches, tar_bytes, write_folder

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]  # also run on the current and jax stacks (Makefile)

TRAIN, TEST = random_batches(n_train_batches=3, per_batch=12, n_test=10, seed=1)
FILES = batch_files(TRAIN, TEST)


def _from_path(path) -> object:
    return load_dataset(OmegaConf.create({"name": "cifar10", "path": str(path)}))


def _assert_is_the_fixture(data):
    assert np.array_equal(data.x_train, np.concatenate([x for x, _ in TRAIN]))
    assert np.array_equal(data.y_train, np.concatenate([y for _, y in TRAIN]))
    assert np.array_equal(data.x_test, TEST[0]) and np.array_equal(data.y_test, TEST[1])
    assert data.x_train.dtype == np.uint8 and data.y_train.dtype == np.int64
    assert data.class_names[0] == "airplane" and len(data.class_names) == 10


def test_data_path_at_the_tarball(tmp_path):
    archive = tmp_path / "copy.tar.gz"
    archive.write_bytes(tar_bytes(FILES))
    data = _from_path(archive)
    _assert_is_the_fixture(data)
    assert data.source == str(archive)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.tar.gz"]  # read in place, nothing extracted


def test_data_path_at_a_folder_holding_the_batches_folder(tmp_path):
    write_folder(tmp_path / "cifar-10-batches-py", FILES)
    _assert_is_the_fixture(_from_path(tmp_path))


def test_data_path_at_the_batches_folder_itself(tmp_path):
    folder = write_folder(tmp_path / "cifar-10-batches-py", FILES)
    data = _from_path(folder)
    _assert_is_the_fixture(data)
    assert data.source == str(folder)


def test_data_path_at_a_folder_holding_the_tarball_and_with_tilde(tmp_path, monkeypatch):
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(tar_bytes(FILES))
    monkeypatch.setenv("HOME", str(tmp_path))
    _assert_is_the_fixture(_from_path("~"))


def test_train_is_whatever_data_batches_exist_but_at_least_one(tmp_path):
    files = {k: v for k, v in FILES.items() if k != "data_batch_3"}
    data = _from_path(write_folder(tmp_path / "two", files))
    assert len(data.x_train) == 24
    only_test = {k: v for k, v in FILES.items() if not k.startswith("data_batch")}
    with pytest.raises(DataError, match="data_batch_1 is missing"):
        _from_path(write_folder(tmp_path / "none", only_test))


@pytest.mark.parametrize("missing", ["test_batch", "batches.meta"])
def test_a_missing_test_batch_or_meta_names_the_file(tmp_path, missing):
    archive = tmp_path / "copy.tar.gz"
    archive.write_bytes(tar_bytes({k: v for k, v in FILES.items() if k != missing}))
    with pytest.raises(
        DataError, match=f"copy.tar.gz:cifar-10-batches-py/{missing} is missing; point data.path at a good copy"
    ):
        _from_path(archive)


def test_data_path_that_does_not_exist_or_holds_nothing_useful(tmp_path):
    with pytest.raises(DataError, match="does not exist.*data.path=null"):
        _from_path(tmp_path / "nope")
    with pytest.raises(DataError, match="holds neither"):
        _from_path(tmp_path)


def test_a_truncated_or_non_tar_archive_is_a_one_line_error(tmp_path):
    archive = tmp_path / "cut.tar.gz"
    archive.write_bytes(tar_bytes(FILES)[:3000])
    with pytest.raises(DataError, match=r"cut.tar.gz is not a readable tar.gz") as err:
        _from_path(archive)
    assert "\n" not in str(err.value)
    archive.write_bytes(b"<html>not found</html>")
    with pytest.raises(DataError, match=r"cut.tar.gz is not a readable tar.gz"):
        _from_path(archive)


def test_archive_members_outside_the_batches_folder_are_skipped_and_dot_slash_names_accepted(tmp_path):
    extra = [
        (member("./", tarfile.DIRTYPE), None),
        (member("./cifar-10-batches-py/readme.html"), b"<html/>"),
        (member("NOTES.txt"), b"hi"),
    ]
    archive = tmp_path / "copy.tar.gz"
    archive.write_bytes(tar_bytes(FILES, extra))
    _assert_is_the_fixture(_from_path(archive))


HOSTILE = {
    "dotdot": lambda outside: [(member("cifar-10-batches-py/../../evil"), b"x"), (member("../evil"), b"x")],
    "absolute": lambda outside: [(member(str(outside / "abs_evil")), b"x")],
    "symlink": lambda outside: [
        (member("cifar-10-batches-py/data_batch_5", tarfile.SYMTYPE, str(outside / "link_target")), None)
    ],
    "hardlink": lambda outside: [(member("cifar-10-batches-py/data_batch_5", tarfile.LNKTYPE, "../../evil"), None)],
    "device": lambda outside: [(member("cifar-10-batches-py/data_batch_5", tarfile.CHRTYPE), None)],
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_archives_are_refused_and_nothing_is_written_outside_the_cache(tmp_path, kind):
    outside = tmp_path / "outside"
    outside.mkdir()
    cache = tmp_path / "deep" / "er" / "cache"
    cache.mkdir(parents=True)
    archive = tar_bytes(FILES, HOSTILE[kind](outside))
    (cache / "cifar-10-python.tar.gz").write_bytes(archive)  # as if downloaded: md5 and size match the config
    with pytest.raises(DataError, match="unsafe path|link or special file") as err:
        load_dataset(download_cfg(cache, "http://127.0.0.1:9/unused", archive, download=False))
    assert "\n" not in str(err.value)
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        ["outside", "deep", "er", "cache", "cifar-10-python.tar.gz", ".cifar-10.lock"]
    )
    # Reading the same archive in place through data.path refuses it too.
    (tmp_path / "copy.tar.gz").write_bytes(archive)
    with pytest.raises(DataError, match="unsafe path|link or special file"):
        _from_path(tmp_path / "copy.tar.gz")
