"""Resume fingerprints that see content (issue 37, item 5): a helper module the builder imports (edited from
relu to tanh, it resumed silently) and the data's bytes (images inverted, labels shifted under the same counts),
the latter cached by path, size, mtime and ctime so that a resume of the full CIFAR-10 pays well under a second.
End to end (an edited helper, inverted images, each refused on resume): tests/rundir/test_resume_hostile.py, whose
run on a folder of images checks every change to its code or data."""

from __future__ import annotations

import os
import time

from omegaconf import OmegaConf

from cifar_dist.rundir.fingerprint import CACHE, differences, fingerprint, imported_sources

BUILDER = """
from myhelpers import ACTIVATION
from pkg.sub import WIDTH
import numpy as np  # an installed package: not the user's code


def build(num_classes, width=8):
    from tensorflow import keras

    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(WIDTH, 3, activation=ACTIVATION)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
"""
CIFAR10_BATCH_BYTES = 31_035_704  # a real data_batch_N of cifar-10-batches-py


def user_code(folder):
    (folder / "pkg").mkdir(parents=True)
    (folder / "mymodels.py").write_text(BUILDER)
    (folder / "myhelpers.py").write_text('ACTIVATION = "relu"\n')
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "sub.py").write_text("from .sizes import WIDTH\n")
    (folder / "pkg" / "sizes.py").write_text("WIDTH = 8\n")
    return folder


def test_the_builders_imports_from_the_users_code_root_are_fingerprinted_by_content(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(user_code(tmp_path)))
    before = imported_sources("mymodels.build")
    assert set(before) == {"myhelpers.py", "pkg/__init__.py", "pkg/sub.py", "pkg/sizes.py"}, before
    (tmp_path / "myhelpers.py").write_text('ACTIVATION = "tanh"\n')
    (tmp_path / "pkg" / "sizes.py").write_text("WIDTH = 16\n")  # two imports deep
    after = imported_sources("mymodels.build")
    assert [k for k in before if before[k] != after[k]] == ["myhelpers.py", "pkg/sizes.py"]
    assert imported_sources("cifar_dist.models.seed_cnn.build") is None  # a built-in: its own file is the builder


def full_size_cifar10(folder):
    batches = folder / "cifar-10-batches-py"
    batches.mkdir(parents=True)
    block = os.urandom(1 << 20)
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"):
        with open(batches / name, "wb") as f:
            for _ in range(CIFAR10_BATCH_BYTES >> 20):
                f.write(block)
            f.write(block[: CIFAR10_BATCH_BYTES % (1 << 20)])
    (batches / "batches.meta").write_bytes(b"meta")
    return batches


def test_the_datas_bytes_are_fingerprinted_and_a_resume_reuses_unchanged_files_digests(tmp_path):
    batches = full_size_cifar10(tmp_path / "data")
    cfg = OmegaConf.create(
        {"model": {"_target_": "nomodule.build"}, "data": {"name": "cifar10", "path": str(tmp_path / "data")}}
    )
    first = fingerprint(cfg)
    assert first["data_bytes"] and len(first[CACHE]) == 7
    started = time.perf_counter()
    again = fingerprint(cfg, first[CACHE])
    assert time.perf_counter() - started < 1.0 and again == first  # a resume: a stat per file
    stale = {path: [*stat, "0" * 16] for path, (*stat, _) in first[CACHE].items()}
    assert fingerprint(cfg, stale)["data_bytes"] != first["data_bytes"]  # the digests were taken, not re-hashed

    with open(batches / "data_batch_3", "r+b") as f:  # labels shifted: the same size, other bytes
        f.seek(1000)
        f.write(b"\x09" * 16)
    changed = fingerprint(cfg, first[CACHE])
    assert differences(first, changed) == [f"data_bytes (was {first['data_bytes']}, now {changed['data_bytes']})"]
    moved = tmp_path / "moved"
    (tmp_path / "data").rename(moved)  # data.path is free: the same bytes elsewhere are the same data
    cfg.data.path = str(moved)
    assert fingerprint(cfg)["data_bytes"] == changed["data_bytes"]


def test_an_edit_in_place_with_its_mtime_set_back_is_seen(tmp_path):
    """``touch -r`` (or ``cp -p``, rsync) restores a file's mtime after an edit of the same size; its ctime the kernel
    sets on every change, and no one can set back: the cached digest is not reused (issue 47, item 9)."""
    batches = tmp_path / "data" / "cifar-10-batches-py"
    batches.mkdir(parents=True)
    for name in ("data_batch_1", "data_batch_2", "test_batch", "batches.meta"):
        (batches / name).write_bytes(os.urandom(4096))
    cfg = OmegaConf.create({"model": {"_target_": "nomodule.build"}, "data": {"name": "cifar10", "path": str(batches)}})
    first = fingerprint(cfg)
    edited = batches / "data_batch_2"
    before = edited.stat()
    time.sleep(0.05)  # past the file system's timestamp granularity: the edit is a later change
    with open(edited, "r+b") as f:  # labels shifted: the same size, other bytes
        f.seek(100)
        f.write(b"\x09" * 16)
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r: the old mtime back
    after = edited.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns
    changed = fingerprint(cfg, first[CACHE])
    assert differences(first, changed) == [f"data_bytes (was {first['data_bytes']}, now {changed['data_bytes']})"]
    assert changed[CACHE][str(edited)][:-1] == [after.st_size, after.st_mtime_ns, after.st_ctime_ns]
