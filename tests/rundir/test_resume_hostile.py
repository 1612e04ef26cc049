"""A re-run only ever continues the same experiment, also where a hostile user tried to slip past it.

Issue 31: a sweep point resumed with another lr (rc 0, its epochs mixed),
a sweep over a folder of the user's own files overwrote them, a key outside
a fixed list (data.split_seed, data.kwargs, trainer.label_smoothing...)
escaped the check, and an edited builder or a renamed class folder resumed
silently. Each is refused in one line before anything in the run dir is
touched. The Slurm variants: tests/launchers/slurm/test_slurm_rerun.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cifar_dist.rundir.lock import LOCK_NAME
from helpers.cli import assert_ok, compose_cfg, error_lines, one_error_line, read_metrics, run_cli

FIRST_EPOCH = "trainer.max_epochs_per_run=1"  # with half_run_overrides: a run like half_run


def snapshot(run_dir: Path) -> dict:
    return {
        str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != LOCK_NAME
    }


def test_a_sweep_point_that_would_resume_with_another_lr_is_refused_untouched(half_run, half_run_overrides, tmp_path):
    """Point #0 of an earlier sweep holds one epoch of two with lr 1e-4: ``half_run`` (trained with the default lr,
    1e-4) in a sweep's dir (its ``multirun.yaml``). A point is checked as a single run is (``guard_run_dir``), so
    how its epoch was trained does not matter; the Slurm variant trains its sweep (test_slurm_rerun.py)."""
    sweep = tmp_path / "sweep"
    shutil.copytree(half_run, sweep / "0")
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    assert OmegaConf.load(sweep / "0" / ".hydra" / "config.yaml").optimizer.lr == 1e-4
    before = snapshot(sweep / "0")

    again = run_cli(
        "-m", *half_run_overrides, FIRST_EPOCH, "optimizer.lr=5e-4", f"hydra.sweep.dir={sweep}", timeout=300
    )
    line = one_error_line(again)
    assert line.startswith("cifar_dist: error: point #0 (") and "optimizer.lr (was 0.0001, now 0.0005)" in line
    assert snapshot(sweep / "0") == before  # .hydra/config.yaml still says 1e-4, nothing trained
    assert OmegaConf.load(sweep / "0" / ".hydra" / "config.yaml").optimizer.lr == 1e-4


def test_a_sweep_into_a_folder_of_the_users_files_is_refused_untouched(half_run_overrides, tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")  # looks like a sweep's dir: its point is checked
    (sweep / "0" / "metrics.json").write_text('{"mine": 1}\n')
    (sweep / "0" / "training_log.csv").write_text("my,own\n")
    before = snapshot(sweep / "0")

    proc = run_cli("-m", *half_run_overrides, FIRST_EPOCH, "optimizer.lr=1e-4", f"hydra.sweep.dir={sweep}", timeout=120)
    line = one_error_line(proc)
    assert "point #0 (" in line and "was not made by cifar_dist" in line
    assert snapshot(sweep / "0") == before and sorted(p.name for p in (sweep / "0").iterdir()) == [
        "metrics.json",
        "training_log.csv",
    ]  # no .hydra/, no log, no .kept-* copies


@pytest.mark.parametrize(
    "override, key",
    [
        ("data.split_seed=1", "data.split_seed"),
        ("data.val_fraction=0.5", "data.val_fraction"),
        ("+data.kwargs.scale=255", "data.kwargs.scale"),
        ("data._target_=mine.other", "data._target_"),
        ("trainer.label_smoothing=0.1", "trainer.label_smoothing"),
        ("model.dense_units=7", "model.dense_units"),
    ],
)
def test_every_key_of_the_experiment_is_fixed_unless_listed_free(override, key):
    from cifar_dist.rundir.resume_policy import differences

    data = "data=custom" if "kwargs" in override or "_target_" in override else "data=folder"
    base = (data, "data._target_=mine.make") if data == "data=custom" else (data, "data.path=/x")
    saved, new = compose_cfg(*base), compose_cfg(*base, override)
    assert [d.split(" ")[0] for d in differences(saved, new)] == [key]


def test_the_free_keys_are_real_keys_and_free():
    from cifar_dist.rundir.resume_policy import FREE, all_settings, differences

    known = set(all_settings(compose_cfg("data=folder", "data.path=/x"))) | set(all_settings(compose_cfg()))
    assert FREE <= known  # a renamed key must not leave a stale name here
    assert (
        differences(
            compose_cfg("data=folder", "data.path=/x"),
            compose_cfg("data=folder", "data.path=/y", "trainer.epochs=9", "data.prefetch=2"),
        )
        == []
    )


def test_another_recipe_key_is_refused_end_to_end(half_run, half_run_overrides, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(half_run, run_dir)
    before = snapshot(run_dir)
    proc = run_cli(
        *half_run_overrides, FIRST_EPOCH, "trainer.label_smoothing=0.1", f"hydra.run.dir={run_dir}", timeout=120
    )
    assert "trainer.label_smoothing (was 0.0, now 0.1)" in one_error_line(proc)
    assert snapshot(run_dir) == before


@pytest.fixture
def folder_run(tmp_path):
    """One epoch of two: the user's own builder (tests/helpers/user_project.py), which imports a helper module of
    the user's (tests/rundir/test_fingerprint_content.py), on a small image folder."""
    from helpers.cifar_fixtures import random_batches, write_png_tree
    from helpers.user_project import write_user_project

    project = write_user_project(tmp_path / "project")
    (project / "myhelpers.py").write_text('ACTIVATION = "relu"\n')
    (project / "mymodels.py").write_text(
        (project / "mymodels.py")
        .read_text()
        .replace('activation="relu"', "activation=ACTIVATION")
        .replace("from tensorflow import keras", "from tensorflow import keras\nfrom myhelpers import ACTIVATION")
    )
    (train,), test = random_batches(n_train_batches=1, per_batch=40, n_test=20)
    write_png_tree(project / "images", {"train": train, "test": test})
    args = (
        "--config-dir",
        "myconf",
        "model=tiny",
        "data=folder",
        "data.path=images",
        "trainer.epochs=2",
        "trainer.batch_size=16",
        "trainer.verbose=0",
        "trainer.plot=false",
        "trainer.tensorboard=false",
        "hydra.run.dir=run",
    )
    first = run_cli(*args, "trainer.max_epochs_per_run=1", cwd=project, timeout=300)
    assert_ok(first)
    return project, args


def test_an_edited_builder_or_helper_inverted_images_or_a_renamed_class_folder_are_refused_unless_accepted(
    folder_run,
):
    """Each change to the code or the data of the run is refused in one line, the run dir untouched; accepted, the
    run resumes (the content fingerprints' end-to-end test, tests/rundir/test_fingerprint_content.py, too)."""
    import numpy as np
    from PIL import Image

    project, args = folder_run
    source = (project / "mymodels.py").read_text()
    before = snapshot(project / "run")

    (project / "mymodels.py").write_text(source.replace("GlobalAveragePooling2D", "GlobalMaxPooling2D"))
    line = one_error_line(run_cli(*args, cwd=project, timeout=120))
    assert "trained with other code or data: builder (was " in line and "trainer.resume_despite_changes=true" in line
    assert snapshot(project / "run") == before
    (project / "mymodels.py").write_text(source)

    (project / "myhelpers.py").write_text('ACTIVATION = "tanh"\n')
    line = one_error_line(run_cli(*args, cwd=project, timeout=120))
    assert "trained with other code or data: builder_sources.myhelpers.py (was " in line, line
    assert snapshot(project / "run") == before
    (project / "myhelpers.py").write_text('ACTIVATION = "relu"\n')

    image = sorted((project / "images" / "train").rglob("*.png"))[0]
    original = image.read_bytes()
    Image.fromarray(255 - np.asarray(Image.open(image))).save(image)  # inverted: the same counts and names
    line = one_error_line(run_cli(*args, cwd=project, timeout=120))
    reasons = line.split("trained with other code or data: ", 1)[-1]  # (the run dir's path names this test)
    assert reasons.startswith("data_files.bytes (was ") and "builder" not in reasons, line
    assert snapshot(project / "run") == before
    image.write_bytes(original)

    (project / "images" / "train" / "cat").rename(project / "images" / "train" / "kat")
    (project / "images" / "test" / "cat").rename(project / "images" / "test" / "kat")
    line = one_error_line(run_cli(*args, cwd=project, timeout=120))
    reasons = line.split("trained with other code or data: ", 1)[-1]
    assert "data_files.class_names (was [" in reasons and "'kat'" in reasons and "builder (was" not in reasons, line
    assert snapshot(project / "run") == before

    accepted = run_cli(*args, "trainer.resume_despite_changes=true", cwd=project, timeout=300)
    assert_ok(accepted)
    metrics = read_metrics(project / "run")
    assert metrics["resumed_from_epoch"] == 1 and metrics["complete"] and "kat" in metrics["run"]["class_names"]
    assert not error_lines(accepted)


FACTORY = """
import numpy as np
import tensorflow as tf

from cifar_dist.data.streams import DataStreams


def make(seed, path="images.npz"):
    d = np.load(path)
    split = lambda x, y: tf.data.Dataset.from_tensor_slices((x.astype("float32") / 255.0, y.astype("int64")))
    return DataStreams(train=split(d["x_train"], d["y_train"]), test=split(d["x_test"], d["y_test"]), num_classes=10)
"""


@pytest.mark.slow  # ~45 s on 2 ranks; the builder and class-folder fingerprints stay in the default suite
def test_a_factorys_data_changed_under_the_same_config_is_refused_on_every_rank(tmp_path):
    import numpy as np

    from helpers.cifar_fixtures import sample_batches
    from helpers.user_project import write_user_project

    project = write_user_project(tmp_path / "project")
    (project / "myfactory.py").write_text(FACTORY)
    train, (x_test, y_test) = sample_batches(per_batch=32)
    x, y = np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train])
    np.savez(project / "images.npz", x_train=x, y_train=y, x_test=x_test, y_test=y_test)
    args = (
        "--config-dir",
        "myconf",
        "model=tiny",
        "data=custom",
        "data._target_=myfactory.make",
        "trainer.epochs=4",
        "trainer.batch_size=16",
        "trainer.verbose=0",
        "trainer.plot=false",
        "trainer.tensorboard=false",
        "launcher=mpirun",
        "launcher.np=2",
        "hydra.run.dir=run",
    )
    first = run_cli(*args, "trainer.max_epochs_per_run=1", cwd=project, timeout=300)
    assert_ok(first)

    np.savez(project / "images.npz", x_train=x[:64], y_train=y[:64], x_test=x_test, y_test=y_test)
    proc = run_cli(*args, cwd=project, timeout=300)
    lines = [
        line for line in proc.stdout.splitlines() if line.startswith("cifar_dist: error:")
    ]  # rank 0 streamed, then the launcher: one reason
    assert proc.returncode == 2 and len(set(lines)) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout[
        -3000:
    ]
    assert "trained with other code or data: data_loaded.train_images (was 128, now 64)" in lines[0]
    assert (
        read_metrics(project / "run")["resumed_from_epoch"] == 0 and len(read_metrics(project / "run")["epochs"]) == 1
    )
