"""End-to-end: `python -m cifar_dist` on the packaged sample, in a subprocess, as a user runs it."""

import csv
import shutil

import pytest

from helpers.cli import assert_ok, cli_env, error_lines, read_metrics, run_cli, tiny_cifar

CHANCE = 0.10


def test_main_job_trains_saves_and_reports(trained_run):
    run_dir, proc = trained_run
    m = read_metrics(run_dir)
    assert m["complete"] is True and m["ranks"] == 1
    assert [e["epoch"] for e in m["epochs"]] == [1, 2, 3]
    for e in m["epochs"]:
        assert {"loss", "accuracy", "val_loss", "val_accuracy", "images_per_sec", "epoch_seconds", "lr"} <= set(e)
    assert m["test"]["samples"] == 1017
    # Seeded 3-epoch run on 4,068 real images: well above chance (measured ~0.33).
    assert m["test"]["accuracy"] > 2 * CHANCE
    assert m["images_per_sec"] > 0 and m["wall_time_s"] > 0
    assert m["run"]["lr_scaled"] == pytest.approx(1e-4)

    # The console shows progress, then the seed's closing lines.
    assert "Epoch 3/3" in proc.stdout
    assert "Test loss:" in proc.stdout and "Test accuracy:" in proc.stdout

    assert [p.name for p in sorted((run_dir / "checkpoints").iterdir())] == [
        "checkpoint-001.h5",
        "checkpoint-002.h5",
        "checkpoint-003.h5",
    ]
    with open(run_dir / "training_log.csv") as f:
        assert len(list(csv.DictReader(f))) == 3
    assert (run_dir / "learning_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert (run_dir / ".hydra" / "config.yaml").exists()


def test_the_last_line_of_a_run_lists_the_files_it_wrote(trained_run):
    run_dir, proc = trained_run
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f"cifar_dist: wrote {run_dir}/: ")
    wrote = last.split(": ", 2)[2].split(", ")
    assert {
        "metrics.json",
        "training_log.csv",
        "learning_curves.png",
        "checkpoints/",
        "saved_models/",
        "tensorboard/",
        "cifar_dist.log",
    } <= set(wrote)
    assert not [name for name in wrote if name.startswith(".")]  # the lock, the marker, .hydra/: bookkeeping


def test_saved_model_loads_and_scores_what_metrics_say(trained_run):
    run_dir, _ = trained_run
    import numpy as np
    import tensorflow as tf
    from omegaconf import OmegaConf

    import cifar_dist  # noqa: F401
    from cifar_dist.config.schema import DataConfig
    from cifar_dist.data import load_dataset

    model = tf.keras.models.load_model(run_dir / "saved_models" / "keras_cifar10_trained_model.h5")
    data = load_dataset(OmegaConf.structured(DataConfig(name="sample")))
    probs = model.predict(data.x_test.astype(np.float32) / 255.0, verbose=0, batch_size=256)
    accuracy = float((probs.argmax(axis=1) == data.y_test).mean())
    assert accuracy == pytest.approx(read_metrics(run_dir)["test"]["accuracy"], abs=1e-6)


def test_resume_continues_from_the_last_checkpoint(half_run, tiny_data, tmp_path):
    # The first run: the session's half_run (epoch 1 of 2, trainer.max_epochs_per_run=1, checked to exit 0),
    # copied, since this test resumes it.
    run_dir = tmp_path / "run"
    shutil.copytree(half_run, run_dir)
    common = [
        *tiny_cifar(tiny_data),  # half_run's data and batch size
        "trainer.batch_size=64",
        "trainer.epochs=2",
        "trainer.tensorboard=false",
        "trainer.plot=false",
        f"hydra.run.dir={run_dir}",
    ]
    m = read_metrics(run_dir)
    assert m["complete"] is False and [e["epoch"] for e in m["epochs"]] == [1]
    assert not (run_dir / "saved_models").exists()
    first_epoch = m["epochs"][0]

    second = run_cli(*common)
    assert_ok(second)
    assert "resuming after epoch 1" in second.stdout + second.stderr
    m = read_metrics(run_dir)
    assert m["complete"] is True and m["resumed_from_epoch"] == 1
    assert [e["epoch"] for e in m["epochs"]] == [1, 2]
    assert m["epochs"][0] == first_epoch  # history kept, not rewritten
    assert "Epoch 2/2" in second.stdout and "Epoch 1/2" not in second.stdout
    with open(run_dir / "training_log.csv") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["1", "2"]  # 1-based, as Keras prints
    assert (run_dir / "saved_models" / "keras_cifar10_trained_model.h5").exists()


def test_resume_false_refuses_to_overwrite_checkpoints(trained_run, tmp_path):
    src, _ = trained_run
    run_dir = tmp_path / "copy"
    shutil.copytree(src / "checkpoints", run_dir / "checkpoints")
    before = {p.name: p.stat().st_mtime_ns for p in (run_dir / "checkpoints").iterdir()}
    proc = run_cli("data=sample", "trainer.epochs=3", "trainer.resume=false", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2
    err = error_lines(proc)
    assert len(err) == 1 and "trainer.resume=true" in err[0]
    assert {p.name: p.stat().st_mtime_ns for p in (run_dir / "checkpoints").iterdir()} == before


def test_keras2_built_ins_without_keras2_are_refused_with_a_one_line_fix(tmp_path):
    """TF_USE_LEGACY_KERAS=0 makes tf.keras Keras 3: the built-ins' default Keras 2 cannot be had (Keras 3
    models train: tests/training/test_keras3.py)."""
    proc = run_cli("data=sample", f"hydra.run.dir={tmp_path}", env=cli_env(TF_USE_LEGACY_KERAS="0"), timeout=300)
    assert proc.returncode == 2
    err = error_lines(proc)
    assert len(err) == 1
    assert "tf.keras is Keras 3" in err[0] and "engine.keras=3" in err[0] and "TF_USE_LEGACY_KERAS" in err[0]
    assert "Traceback" not in proc.stderr


def test_bad_values_fail_before_training(tmp_path):
    proc = run_cli("data=sample", "trainer.epochs=0", "trainer.batch_size=0", f"hydra.run.dir={tmp_path}", timeout=120)
    assert proc.returncode == 2
    assert "trainer.epochs=0" in proc.stderr and "trainer.batch_size=0" in proc.stderr
    assert "Epoch" not in proc.stdout


# A local multirun (-m): each point trained in its own dir, and the sweep's summary, are asserted by
# tests/tracking/test_tracking.py::test_sweep_points_grouped_under_one_parent_and_linked_from_the_summary, the same
# 2-point sweep on tiny_data, tracked in MLflow: one sweep for both.
