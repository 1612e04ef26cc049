"""Checkpoints are written atomically and a resume skips one that does not load."""

import numpy as np
import pytest
import tensorflow as tf

import cifar_dist  # noqa: F401
from cifar_dist.models.seed_cnn import build
from cifar_dist.rundir import checkpoints
from cifar_dist.training.optimizers import rmsprop

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)


def compiled_model():
    model = build(dense_units=16)
    model.compile(loss="categorical_crossentropy", optimizer=rmsprop(1e-3), metrics=["accuracy"])
    return model


def train_a_step(model, seed=0):
    rng = np.random.default_rng(seed)
    model.fit(rng.random((8, 32, 32, 3), np.float32), tf.one_hot(rng.integers(0, 10, 8), 10), verbose=0, epochs=1)


def test_save_restore_round_trip_includes_optimizer_state(tmp_path):
    model = compiled_model()
    train_a_step(model)
    path = checkpoints.checkpoint_path(tmp_path, 1)
    checkpoints.atomic_save_model(model, path, include_optimizer=True)
    assert path.name == "checkpoint-001.h5"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind

    fresh = compiled_model()
    checkpoints.restore(fresh, path)
    for a, b in zip(model.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert int(fresh.optimizer.iterations.numpy()) == int(model.optimizer.iterations.numpy()) == 1
    for a, b in zip(model.optimizer.get_weights(), fresh.optimizer.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_failed_save_leaves_the_previous_file_intact(tmp_path, monkeypatch):
    model = compiled_model()
    path = checkpoints.checkpoint_path(tmp_path, 1)
    checkpoints.atomic_save_model(model, path, include_optimizer=True)
    before = path.read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model, "save", disk_full)
    with pytest.raises(OSError):
        checkpoints.atomic_save_model(model, path, include_optimizer=True)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_resume_skips_a_corrupt_newest_checkpoint(tmp_path):
    model = compiled_model()
    train_a_step(model)
    checkpoints.atomic_save_model(model, checkpoints.checkpoint_path(tmp_path, 1), include_optimizer=True)
    expected = model.get_weights()
    corrupt = checkpoints.checkpoint_path(tmp_path, 2)
    corrupt.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)  # truncated HDF5

    fresh = compiled_model()
    restored = checkpoints.restore_latest(fresh, tmp_path)
    assert restored.epoch == 1
    assert len(restored.skipped) == 1 and "checkpoint-002.h5" in restored.skipped[0]
    assert corrupt.exists()  # reported, never deleted
    for a, b in zip(expected, fresh.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_prune_keeps_the_newest(tmp_path):
    for epoch in range(1, 8):
        checkpoints.checkpoint_path(tmp_path, epoch).write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("kept")
    checkpoints.prune(tmp_path, keep=3)
    assert [e for e, _ in checkpoints.list_checkpoints(tmp_path)] == [5, 6, 7]
    assert (tmp_path / "notes.txt").exists()


def test_written_files_get_the_umask_mode_not_mkstemps_0600(tmp_path):
    import os

    from cifar_dist.common.atomic_files import atomic_write_text

    old = os.umask(0o022)
    try:
        checkpoints.atomic_save_model(compiled_model(), tmp_path / "m.h5", include_optimizer=False)
        atomic_write_text(tmp_path / "metrics.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "m.h5").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "metrics.json").stat().st_mode & 0o777 == 0o644


class _Model:
    """What AtomicCheckpoint reads of a model: whether a callback stopped training."""

    stop_training = False


@pytest.mark.parametrize(
    "interval, stops_after, written",
    [
        (0.0, None, [1, 2, 3, 4]),  # every epoch (the default)
        (3600.0, None, [4]),  # the run's last epoch only
        (3600.0, 2, [2]),  # the epoch a stop signal or trainer.max_epochs_per_run stops after: resumable there
    ],
)
def test_a_checkpoint_interval_writes_less_often_but_always_the_epoch_a_run_ends_with(
    tmp_path, monkeypatch, interval, stops_after, written
):
    from cifar_dist.training.callbacks import AtomicCheckpoint

    saved = []
    monkeypatch.setattr(checkpoints, "atomic_save_model", lambda model, path, include_optimizer: saved.append(path))
    callback = AtomicCheckpoint(tmp_path, keep=0, interval_s=interval)
    model = _Model()
    callback.set_model(model)
    callback.set_params({"epochs": 4})
    for epoch in range(4):
        model.stop_training = epoch + 1 == stops_after
        callback.on_epoch_end(epoch)
        if model.stop_training:
            break
    assert [int(p.stem.split("-")[1]) for p in saved] == written
