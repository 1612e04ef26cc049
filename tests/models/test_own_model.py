"""A user's own model: a builder in their module, a ``model/<name>.yaml`` in their config dir.

It composes with its own arguments; a key its builder does not take is
refused in one line naming the nearest parameter, before Hydra writes a run
dir (read from the builder's source, nothing imported) and again on the rank
(``inspect.signature``) before any data is read; the built-in models keep
their typed schemas; a saved model with the user's custom layers loads for
``task=evaluate`` when the user's module is named, and is refused otherwise.
The user's files are written into temporary directories outside the checkout.
"""

from __future__ import annotations

import sys
import textwrap
import uuid

import pytest
from omegaconf import OmegaConf

from cifar_dist.common.errors import ConfigError
from cifar_dist.config.override_check import command_line_problem
from cifar_dist.models.builder import Parameters, declared_parameters, model_node_problem, signature_parameters
from helpers.cli import cli_env, compose_cfg, one_error_line, run_cli

BUILDERS = """
import functools


def build(num_classes, width=16, dropout=0.2):
    raise RuntimeError("a test of argument checks must never build the model")


def open_build(num_classes, width=16, **kwargs):
    raise RuntimeError("never built here")


def no_classes(width=16):
    raise RuntimeError("never built here")


class Net:
    def __init__(self, num_classes, depth=3):
        raise RuntimeError("never built here")


def _build(num_classes, width=16):
    raise RuntimeError("never built here")


bound = functools.partial(_build, width=4)
"""


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A user's directory: a builder module (a fresh name, never imported) and myconf/model/mine.yaml."""
    name = f"usermodels_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(BUILDERS)
    (tmp_path / "myconf" / "model").mkdir(parents=True)
    (tmp_path / "myconf" / "model" / "mine.yaml").write_text(f"_target_: {name}.build\nwidth: 8\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, name
    sys.modules.pop(name, None)


def problem(folder, *overrides):
    return command_line_problem(["--config-dir", str(folder / "myconf"), *overrides])


def test_a_user_model_composes_with_its_own_arguments(user):
    folder, name = user
    cfg = compose_cfg(f"hydra.searchpath=[file://{folder / 'myconf'}]", "model=mine", "model.width=32")
    assert OmegaConf.to_container(cfg.model) == {"_target_": f"{name}.build", "width": 32}
    assert problem(folder, "model=mine", "model.width=32", "model.dropout=0.1") is None
    assert name not in sys.modules  # checked from its source: nothing of the user's ran


def test_a_misspelt_argument_is_refused_with_the_nearest_parameter(user):
    folder, name = user
    expected = f"{name}.build has no parameter `widht`; did you mean `width`? (its parameters: width, dropout)"
    assert problem(folder, "model=mine", "model.widht=8") == f"model.widht=8: {expected}"
    assert problem(folder, "model=mine", "+model.widht=8") == f"+model.widht=8: {expected}"
    (folder / "myconf" / "model" / "typo.yaml").write_text(f"_target_: {name}.build\nwidht: 8\n")
    assert problem(folder, "model=typo") == f"model.widht (model/typo): {expected}"
    assert name not in sys.modules


def test_the_target_is_checked_too(user):
    folder, name = user
    assert (
        "model._target_=nowhere_xyz.build: cannot import nowhere_xyz.build (no module named 'nowhere_xyz'"
        in problem(folder, "model=mine", "model._target_=nowhere_xyz.build")
    )
    assert "run from the directory that holds nowhere_xyz.py" in problem(
        folder, "model=mine", "model._target_=nowhere_xyz.build"
    )
    assert problem(folder, "model=mine", f"model._target_={name}.biuld") == (
        f"model._target_={name}.biuld: {name}.py defines no `biuld`; did you mean `build`? "
        f"(name a function or class of {name})"
    )
    assert problem(folder, "model=mine", f"model._target_={name}.no_classes").startswith(
        f"model._target_={name}.no_classes: {name}.no_classes takes no `num_classes` argument; add one"
    )
    # A built-in option's keys against a user's builder (the issue's `build() got an unexpected keyword argument`):
    assert problem(folder, "model=seed_cnn", f"model._target_={name}.build").startswith(
        f"model.input_shape (model/seed_cnn): {name}.build has no parameter `input_shape`"
    )


def test_kwargs_classes_and_names_the_source_cannot_tell(user):
    folder, name = user
    assert problem(folder, "model=mine", f"model._target_={name}.open_build", "+model.anything=1") is None
    assert declared_parameters(f"{name}.Net") == Parameters(("num_classes", "depth"), False)
    assert problem(folder, "model=mine", f"model._target_={name}.Net") == (
        f"model.width (model/mine): {name}.Net has no parameter `width`; did you mean `depth`? (its parameters: depth)"
    )
    assert declared_parameters(f"{name}.bound") is None  # a partial: only the rank's inspect.signature can tell
    assert name not in sys.modules


def test_the_rank_checks_the_imported_signature(user):
    folder, name = user
    bound = OmegaConf.create({"_target_": f"{name}.bound", "width": 8, "depht": 2})
    assert model_node_problem(bound) is None  # the source does not say what `bound` takes
    assert model_node_problem(bound, params_of=signature_parameters) == (
        f"model.depht: {name}.bound has no parameter `depht` (its parameters: width)"
    )


def test_built_in_models_keep_their_typed_schemas():
    cfg = compose_cfg("model=resnet9")
    assert OmegaConf.get_type(cfg.model).__name__ == "ResNet9Config"
    assert command_line_problem(["model=resnet9", "+model.widht=3"]).startswith(
        "+model.widht=3: model has no key `widht`; did you mean `width`?"
    )
    assert command_line_problem(["model=seed_cnn", "model.dense_unit=3"]).startswith(
        "model.dense_unit=3: model has no key `dense_unit`; did you mean `dense_units`?"
    )
    for option in ("seed_cnn", "resnet9", "airbench"):  # every built-in builder takes every key of its option
        assert model_node_problem(compose_cfg(f"model={option}").model) is None


def test_the_cli_refuses_it_in_one_line_and_writes_nothing(user, tmp_path):
    folder, name = user
    env = cli_env(PYTHONPATH=f"{folder}:{cli_env().get('PYTHONPATH', '')}")
    for bad in (("model.widht=8",), ("+model.widht=8",)):
        run_dir = tmp_path / "run"
        proc = run_cli(
            "--config-dir",
            str(folder / "myconf"),
            "model=mine",
            *bad,
            "data=sample",
            f"hydra.run.dir={run_dir}",
            cwd=folder,
            env=env,
            timeout=120,
        )
        assert "did you mean `width`?" in one_error_line(proc)
        assert not run_dir.exists()


def test_the_rank_refuses_before_any_data_is_read(user, tmp_path):
    """A name only the imported signature can judge: refused on the rank, before the (missing) data is looked for."""
    folder, name = user
    (folder / "myconf" / "model" / "bound.yaml").write_text(f"_target_: {name}.bound\ndepht: 2\n")
    run_dir = tmp_path / "run"
    proc = run_cli(
        "--config-dir",
        str(folder / "myconf"),
        "model=bound",
        f"data.path={tmp_path / 'absent'}",
        "data.download=false",
        f"hydra.run.dir={run_dir}",
        cwd=folder,
        env=cli_env(),
        timeout=300,
    )
    assert one_error_line(proc).endswith(f"model.depht: {name}.bound has no parameter `depht` (its parameters: width)")
    # The rank had started, found it at its start and wrote nothing but its log: no run dir is left (issue 31).
    assert not run_dir.exists()


LAYERS = """
import tensorflow as tf

keras = tf.keras


@keras.utils.register_keras_serializable("{name}")
class Scale(keras.layers.Layer):
    def __init__(self, factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {{**super().get_config(), "factor": self.factor}}


class Plain(keras.layers.Layer):  # not registered: loaded back by its class name
    def call(self, x):
        return x + 0.0


def build(num_classes):
    inputs = keras.Input(shape=(32, 32, 3))
    x = Plain()(Scale(2.0)(keras.layers.Flatten()(inputs)))
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
"""


def test_a_models_custom_layers_load_when_its_module_is_named(tmp_path, monkeypatch):
    import numpy as np

    from cifar_dist.evaluation.inputs import EvaluationInputError, load_model
    from cifar_dist.evaluation.task import user_model_modules

    name = f"userlayers_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(LAYERS.format(name=name)))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = __import__(name)
        model = module.build(10)
        path = tmp_path / "mine.h5"
        model.save(path, save_format="h5")
        with pytest.raises(
            EvaluationInputError, match=rf"{name}>Scale 'scale(_\d+)?', Plain 'plain(_\d+)?'\); refusing to load it"
        ):
            load_model(path, 10)
        trusted = user_model_modules(OmegaConf.create({"_target_": f"{name}.build"}))
        assert (
            trusted == [name]
            and user_model_modules(OmegaConf.create({"_target_": "cifar_dist.models.resnet9.build"})) == []
        )
        loaded = load_model(path, 10, trusted_modules=trusted)
        x = np.random.default_rng(0).random((2, 32, 32, 3), np.float32)
        assert np.allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
        # Naming a module trusts its layers only: a Lambda in the same file is still refused.
        evil = module.keras.Sequential(
            [module.keras.Input((32, 32, 3)), module.Scale(), module.keras.layers.Lambda(lambda t: t)]
        )
        evil.save(tmp_path / "evil.h5", save_format="h5")
        with pytest.raises(EvaluationInputError, match=r"\(Lambda 'lambda(_\d+)?'\); refusing"):
            load_model(tmp_path / "evil.h5", None, trusted_modules=trusted, image_size=None)
    finally:
        sys.modules.pop(name, None)


def test_an_unimportable_trusted_module_is_one_line(tmp_path):
    from cifar_dist.evaluation.inputs import EvaluationInputError, trusted_layers_of

    with pytest.raises(
        EvaluationInputError, match="cannot import nowhere_xyz to load its layers .*add that to PYTHONPATH"
    ):
        trusted_layers_of(["nowhere_xyz"])


def test_a_config_error_is_a_config_error():
    with pytest.raises(ConfigError, match="is not module.function"):
        declared_parameters("build")
