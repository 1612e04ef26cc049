"""Training and task=evaluate on the user-facing data options: CIFAR-100, an image folder, a tf.data factory.

All data is built by the tests (nothing is downloaded): a CIFAR-100-format
archive and a PNG tree from the packaged sample's real pixels, and a factory
module written into a temporary directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import numpy as np
import pytest

from helpers.cifar_fixtures import cifar100_tarball, sample_batches, write_png_tree
from helpers.cli import assert_ok, cli_env, compose_cfg, read_metrics, run_cli

needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
QUIET = ("trainer.plot=false", "trainer.tensorboard=false", "trainer.verbose=2")
TWO_RANKS = ("launcher=mpirun", "launcher.np=2", "trainer.epoch_policy=shard")


def _evaluation(run_dir):
    return json.loads((run_dir / "evaluation.json").read_text())


def test_cifar100_trains_with_100_classes_and_evaluates(tmp_path):
    archive = cifar100_tarball(tmp_path / "cifar-100-python.tar.gz", per_batch=128)
    data = ("data=cifar100", f"data.path={archive}")
    run = tmp_path / "run"
    assert_ok(run_cli(*data, "trainer.epochs=1", "trainer.batch_size=32", *QUIET, f"hydra.run.dir={run}"))
    m = read_metrics(run)
    assert (
        m["complete"]
        and len(m["run"]["class_names"]) == 100
        and m["run"]["class_names"][:2] == ["airplane_0", "airplane_1"]
    )
    out = tmp_path / "eval"
    assert_ok(run_cli("task=evaluate", *data, f"evaluate.model={run}", f"hydra.run.dir={out}"))
    ev = _evaluation(out)
    assert len(ev["confusion_matrix"]["classes"]) == 100 and ev["labelled"] == 128
    assert ev["correct"] == m["test"]["correct"]  # the saved model scores as training reported
    # coarse labels: a 100-class model is refused in one line before anything is scored (the class count
    # task=evaluate checks the model against, from the data option alone, then its model check: in this process)
    from cifar_dist.data import num_classes_of
    from cifar_dist.evaluation.inputs import EvaluationInputError, load_model, resolve_model_path

    coarse = compose_cfg("task=evaluate", *data, "data.label_mode=coarse", f"evaluate.model={run}")
    with pytest.raises(EvaluationInputError) as refused:
        load_model(resolve_model_path(str(run)), num_classes_of(coarse.data))
    assert "to 100 classes, not 32x32x3 images to 20 classes" in str(refused.value)


@pytest.fixture(scope="module")
def png_tree(tmp_path_factory):
    """The whole packaged sample as PNGs: train/<class>/NNNNN.png and test/<class>/... (lossless: the same pixels)."""
    train, test = sample_batches()
    x, y = np.concatenate([a for a, _ in train]), np.concatenate([b for _, b in train])
    return write_png_tree(tmp_path_factory.mktemp("png") / "tree", {"train": (x, y), "test": test})


@needs_mpirun
@pytest.mark.horovod  # two ranks of a Keras 2 model
def test_folder_on_two_ranks_matches_the_pickles_and_evaluates(png_tree, tmp_path):
    """The same images from PNG files and from the pickles, same seed, 2 ranks: the same accuracy within noise.

    The two runs see the images in different orders (the folder is sharded by
    file position, the arrays by a permutation), so they are two draws of the
    same experiment, not bit-equal. On the 1,017 test images the standard
    error of an accuracy near 0.3 is sqrt(0.3 * 0.7 / 1017) = 0.014, of a
    difference of two such runs 0.02; 0.06 is three of those. Both must also
    be well above chance (0.10) so that two broken runs cannot pass.
    """
    common = (*TWO_RANKS, "trainer.epochs=2", "trainer.seed=7", *QUIET)  # the pickles' run: ~0.30 after 2 epochs
    folder_run, pickle_run = tmp_path / "folder", tmp_path / "pickle"
    assert_ok(run_cli("data=folder", f"data.path={png_tree}", *common, f"hydra.run.dir={folder_run}", timeout=900))
    assert_ok(run_cli("data=sample", *common, f"hydra.run.dir={pickle_run}", timeout=900))
    folder, pickle = read_metrics(folder_run), read_metrics(pickle_run)
    assert folder["ranks"] == pickle["ranks"] == 2 and folder["ranks_in_sync"]
    assert folder["test"]["samples"] == pickle["test"]["samples"] == 1017
    assert folder["run"]["steps_per_epoch"] == pickle["run"]["steps_per_epoch"]
    a, b = folder["test"]["accuracy"], pickle["test"]["accuracy"]
    print(f"test accuracy: folder {a:.4f}, pickle {b:.4f}")
    assert a > 0.2 and b > 0.2 and abs(a - b) <= 0.06, (a, b)
    out = tmp_path / "eval"
    assert_ok(
        run_cli(
            "task=evaluate",
            "data=folder",
            f"data.path={png_tree}",
            f"evaluate.model={folder_run}",
            f"hydra.run.dir={out}",
        )
    )
    ev = _evaluation(out)
    assert ev["correct"] == folder["test"]["correct"] and ev["confusion_matrix"]["classes"][0] == "airplane"
    first = (out / "predictions.csv").read_text().splitlines()[1]
    assert ",0,airplane," in first  # the folder's first test image, named by its class folder


FACTORY = textwrap.dedent('''
    """A user's data: 4 classes of coloured noise (each class its own mean colour)."""
    import numpy as np
    import tensorflow as tf

    from cifar_dist.data.streams import DataStreams

    COLOURS = np.array([[0.8, 0.2, 0.2], [0.2, 0.8, 0.2], [0.2, 0.2, 0.8], [0.8, 0.8, 0.2]], np.float32)


    def _split(rng, n):
        labels = rng.integers(0, 4, n)
        images = np.clip(COLOURS[labels][:, None, None, :] + rng.normal(0, 0.2, (n, 32, 32, 3)), 0, 1)
        return tf.data.Dataset.from_tensor_slices((images.astype(np.float32), labels))


    def make(seed, n_train=512, n_test=128):
        rng = np.random.default_rng(seed)
        return DataStreams(train=_split(rng, n_train), test=_split(rng, n_test), num_classes=4,
                           class_names=["red", "green", "blue", "yellow"])
''')


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user")
    (folder / "mydata.py").write_text(FACTORY)
    return folder


def _user_env(user_dir):
    return cli_env(PYTHONPATH=os.pathsep.join(filter(None, [str(user_dir), os.environ.get("PYTHONPATH")])))


# 2 ranks shard the factory's data (the default suite); 1 rank (also what the README's test runs) with -m slow.
@pytest.mark.parametrize(
    "ranks", [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=[needs_mpirun, pytest.mark.horovod])]
)
def test_a_users_factory_trains_sharded_and_evaluates(user_dir, tmp_path, ranks):
    data = ("data=custom", "data._target_=mydata.make")
    run = tmp_path / "run"
    launch = TWO_RANKS if ranks == 2 else ()
    assert_ok(
        run_cli(
            *data,
            *launch,
            "trainer.epochs=1",
            "trainer.batch_size=32",
            "optimizer.lr=1e-3",
            *QUIET,
            f"hydra.run.dir={run}",
            env=_user_env(user_dir),
            cwd=user_dir,
            timeout=900,
        )
    )
    m = read_metrics(run)
    assert m["complete"] and m["ranks"] == ranks and m["run"]["class_names"] == ["red", "green", "blue", "yellow"]
    assert m["run"]["steps_per_epoch"] == 512 // ranks // 32 and m["test"]["samples"] == 128
    assert m["test"]["accuracy"] > 0.5  # the colours are easy: learnt in one epoch, far above chance (0.25)
    out = tmp_path / "eval"
    assert_ok(
        run_cli(
            "task=evaluate",
            *data,
            f"evaluate.model={run}",
            f"hydra.run.dir={out}",
            env=_user_env(user_dir),
            cwd=user_dir,
        )
    )
    ev = _evaluation(out)
    assert ev["correct"] == m["test"]["correct"] and ev["confusion_matrix"]["classes"] == [
        "red",
        "green",
        "blue",
        "yellow",
    ]
