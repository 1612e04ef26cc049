"""A user's own project, outside the checkout: a model builder, a tf.data factory and a config dir.

``write_user_project(folder)`` writes what a user brings, as README's "Your own
model and data" shows it::

    folder/mymodels.py           build(num_classes, width=8) -> keras.Model (layer "mine_conv")
    folder/mydata.py             make(seed, n_train, n_test) -> DataStreams: the packaged sample's first images
    folder/myconf/model/tiny.yaml   _target_: mymodels.build, width: 8
    folder/myconf/data/mine.yaml    data=custom with _target_: mydata.make and its kwargs

and the tests run ``python -m cifar_dist --config-dir myconf model=tiny data=mine``
with ``folder`` as the working directory (``python -m`` puts it on sys.path,
as for a user), never on the tests' own PYTHONPATH.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from helpers.cli import read_metrics

MODEL = textwrap.dedent('''
    """A user's model: one small conv layer, named so that a test can find it in the saved model."""
    from tensorflow import keras


    def build(num_classes, width=8):
        inputs = keras.Input((32, 32, 3))
        x = keras.layers.Conv2D(width, 3, activation="relu", name="mine_conv")(inputs)
        x = keras.layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x), name="mine")
''')

DATA = textwrap.dedent('''
    """A user's data: the first images of cifar_dist's packaged sample (real pixels), as a tf.data factory."""
    import tensorflow as tf
    from omegaconf import OmegaConf

    from cifar_dist.config.schema import DataConfig
    from cifar_dist.data import load_dataset
    from cifar_dist.data.streams import DataStreams


    def _split(x, y, n):
        return tf.data.Dataset.from_tensor_slices((x[:n].astype("float32") / 255.0, y[:n].astype("int64")))


    def make(seed, n_train=256, n_test=128):
        sample = load_dataset(OmegaConf.structured(DataConfig(name="sample")))
        return DataStreams(train=_split(sample.x_train, sample.y_train, n_train),
                           test=_split(sample.x_test, sample.y_test, n_test),
                           num_classes=sample.num_classes, class_names=list(sample.class_names))
''')

MODEL_YAML = "_target_: mymodels.build\nwidth: 8\n"
DATA_YAML = textwrap.dedent("""\
    defaults:
      - custom
      - _self_
    _target_: mydata.make
    kwargs:
      n_train: 256
      n_test: 128
""")

# What a user types (cwd: the project folder); QUIET keeps runs short and their output small.
USER_ARGS = ("--config-dir", "myconf", "model=tiny", "data=mine")
# The builder argument the e2e runs set on the command line, over the yaml's width: 8.
WIDTH = 4
QUIET = ("trainer.batch_size=32", "trainer.plot=false", "trainer.tensorboard=false", "trainer.verbose=2")


def write_user_project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mymodels.py").write_text(MODEL)
    (folder / "mydata.py").write_text(DATA)
    (folder / "myconf" / "model").mkdir(parents=True, exist_ok=True)
    (folder / "myconf" / "data").mkdir(parents=True, exist_ok=True)
    (folder / "myconf" / "model" / "tiny.yaml").write_text(MODEL_YAML)
    (folder / "myconf" / "data" / "mine.yaml").write_text(DATA_YAML)
    return folder


needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")


def assert_trained_the_users_model(run_dir: Path, ranks: int, epochs: int) -> dict:
    m = read_metrics(run_dir)
    assert m["complete"] and m["ranks"] == ranks and m["run"]["epochs"] == epochs
    assert m["run"]["model"] == "mymodels.build" and m["run"]["data"] == "tf.data factory mydata.make"
    assert m["run"]["train_images"] == 256 and m["test"]["samples"] == 128
    saved = run_dir / "saved_models" / "keras_cifar10_trained_model.h5"
    assert conv_filters(saved) == WIDTH  # the user's layer, built with the command line's width, as the ranks saved it
    return m


def conv_filters(saved: Path) -> int:
    """The output channels of the user's ``mine_conv`` layer in a saved Keras .h5 model."""
    import h5py

    with h5py.File(saved, "r") as h5:
        kernels = []
        h5["model_weights"]["mine_conv"].visititems(
            lambda name, obj: kernels.append(obj.shape) if "kernel" in name else None
        )
    assert len(kernels) == 1, kernels
    return int(kernels[0][-1])
