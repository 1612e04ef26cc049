"""The probe build before any data is read (``model_setup.probe_model_flavor``): a user's model is built once and
checked; a built-in model built in the Keras the config names is not built twice, only its engine's backend is
checked (each build costs a start-up its time: ~0.5 s on a CPU, ~1.8 s on a GPU)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from cifar_dist.models.keras_checks import ModelKerasError
from cifar_dist.training import model_setup

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]


def config(target: str, engine: str = "jax", keras=3):
    return OmegaConf.create({"model": {"_target_": target}, "engine": {"name": engine, "keras": keras}})


def test_a_built_in_model_is_not_built_to_learn_its_keras_and_a_users_is(monkeypatch):
    built = []
    monkeypatch.setattr(model_setup, "instantiate_model", lambda *args: built.append(args) or 1 / 0)
    assert model_setup.probe_model_flavor(config("cifar_dist.models.airbench.build")) == 3
    assert built == []
    with pytest.raises(ModelKerasError, match="mymodels.build failed to build the model"):
        model_setup.probe_model_flavor(config("mymodels.build"))
    assert len(built) == 1


def test_a_built_in_model_in_a_keras_the_engine_does_not_train_is_still_one_line():
    with pytest.raises(ModelKerasError, match="builds a Keras 2 .*model, but engine=jax trains Keras 3"):
        model_setup.probe_model_flavor(config("cifar_dist.models.seed_cnn.build", keras=2))
