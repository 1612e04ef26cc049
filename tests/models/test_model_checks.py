"""What a model builder returned, checked against the data before training (cifar_dist/models/checks.py):
issue 31, hostile 12: a non-Model, the wrong class count, logits instead of probabilities."""

from __future__ import annotations

import textwrap

import pytest
from omegaconf import OmegaConf

from cifar_dist.common.errors import ConfigError
from cifar_dist.config.schema import DataConfig
from cifar_dist.data import load_dataset
from helpers.cli import one_error_line, run_cli

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)

BUILDERS = textwrap.dedent("""
    from tensorflow import keras


    def _body(num_classes, activation):
        inputs = keras.Input((32, 32, 3))
        x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(inputs))
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation=activation)(x))


    def good(num_classes):
        return _body(num_classes, "softmax")


    def logits(num_classes):
        return _body(num_classes, None)


    def wrong_count(num_classes):
        return _body(7, "softmax")


    def not_a_model(num_classes):
        return keras.layers.Dense(num_classes)


    def keras3(num_classes, softmax=True):
        import keras as k3

        inputs = k3.Input((32, 32, 3))
        x = k3.layers.GlobalAveragePooling2D()(inputs)
        return k3.Model(inputs, k3.layers.Dense(num_classes, activation="softmax" if softmax else None)(x))
""")

MESSAGES = {
    "logits": r"returns scores that are not probabilities \(on 8 training images: values .*\); end it with a softmax",
    "wrong_count": r"returns outputs of shape \(7,\) per image, not \(10,\) for the data's 10 classes; end it with",
    "not_a_model": r"returned Dense, not a Keras model; return an uncompiled tf.keras.Model or keras.Model",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own")
    (folder / "badmodels.py").write_text(BUILDERS)
    (folder / "conf" / "model").mkdir(parents=True)
    for name in ("good", *MESSAGES):
        (folder / "conf" / "model" / f"{name}.yaml").write_text(f"_target_: badmodels.{name}\n")
    return folder


@pytest.fixture(scope="module")
def sample():
    return load_dataset(OmegaConf.structured(DataConfig(name="sample")))


@pytest.fixture
def builders(project, monkeypatch):
    import importlib

    monkeypatch.syspath_prepend(str(project))
    return importlib.import_module("badmodels")


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_a_builders_wrong_model_is_refused_in_one_line(builders, sample, name):
    from cifar_dist.models.checks import check_model

    with pytest.raises(ConfigError, match=rf"^model._target_=badmodels.{name} " + MESSAGES[name]) as err:
        check_model(getattr(builders, name)(10), sample, f"badmodels.{name}")
    assert "\n" not in str(err.value)


def test_good_models_of_either_keras_pass_and_keras3_logits_are_refused(builders, sample):
    from cifar_dist.models import seed_cnn
    from cifar_dist.models.checks import check_model

    check_model(builders.good(10), sample, "badmodels.good")
    check_model(seed_cnn.build(10), sample, "cifar_dist.models.seed_cnn.build")
    check_model(builders.keras3(10), sample, "badmodels.keras3")
    with pytest.raises(
        ConfigError, match=r"^model._target_=badmodels.keras3 returns scores that are not probabilities"
    ):
        check_model(builders.keras3(10, softmax=False), sample, "badmodels.keras3")


@pytest.mark.parametrize("name", ["logits", "not_a_model"])
def test_the_cli_refuses_it_in_one_line_before_training(project, tmp_path, name):
    """As reported: logits trained silently against a probability loss; a non-Model was a 23-28-line traceback."""
    proc = run_cli(
        "--config-dir",
        "conf",
        f"model={name}",
        "data=sample",
        "trainer.epochs=1",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=project,
        timeout=300,
    )
    line = one_error_line(proc)
    assert f"model._target_=badmodels.{name}" in line and "Epoch 1/1" not in proc.stdout, line
