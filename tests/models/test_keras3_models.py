"""The built-in models, their custom layers and TTA in Keras 3: the same numbers as Keras 2, loadable in safe mode."""

import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from omegaconf import OmegaConf

import cifar_dist  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from cifar_dist.common.keras_flavor import flavor_of, takes_keras_argument
from cifar_dist.config.override_check import command_line_problem
from cifar_dist.models import airbench, resnet9, seed_cnn
from cifar_dist.models.blocks import adapt, data_fitted_layers
from cifar_dist.models.builder import model_node_problem, signature_parameters
from cifar_dist.models.tta import plain_and_tta, with_tta
from cifar_dist.training.recipe.hooks import fit_to_data
from helpers.cifar_fixtures import sample_batches
from helpers.cli import assert_ok, cli_env, compose_cfg

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)

SMALL = {
    "seed_cnn": (seed_cnn, {}),
    "resnet9": (resnet9, {"width": 8}),
    "airbench": (airbench, {"widths": (8, 16, 16)}),
}


@pytest.fixture(scope="module")
def images():
    train, _ = sample_batches(per_batch=64)
    return np.concatenate([x for x, _ in train]).astype(np.float32) / 255.0


def both(name, images):
    """The built-in ``name`` in Keras 2 (its whitening fitted on ``images``) and in Keras 3 with Keras 2's weights."""
    builder, kwargs = SMALL[name]
    k2, k3 = builder.build(**kwargs), builder.build(keras=keras, **kwargs)
    adapt(k2, images)
    k3.set_weights(k2.get_weights())
    return k2, k3


@pytest.mark.parametrize("name", sorted(SMALL))
def test_each_builtin_predicts_the_same_in_keras_3_as_in_keras_2(name, images):
    k2, k3 = both(name, images)
    assert (flavor_of(k2), flavor_of(k3)) == (2, 3)
    assert [type(layer).__name__ for layer in k3.layers] == [type(layer).__name__ for layer in k2.layers]
    assert k3.count_params() == k2.count_params()
    x = images[:16]
    np.testing.assert_allclose(k3.predict(x, verbose=0), k2.predict(x, verbose=0), rtol=1e-5, atol=1e-6)


def test_keras_3_airbench_fits_its_whitening_and_identity_init_as_keras_2_does(images):
    k2, k3 = airbench.build(widths=(8, 16, 16)), airbench.build(widths=(8, 16, 16), keras=keras)
    assert len(data_fitted_layers(k3)) == 1 and adapt(k3, images) == 1 and adapt(k2, images) == 1
    (w2,), (w3,) = data_fitted_layers(k2), data_fitted_layers(k3)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(w3.kernel), w2.kernel.numpy())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(w3.bias), w2.bias.numpy())
    first = next(layer for layer in k3.layers if isinstance(layer, keras.layers.Conv2D))
    assert keras.ops.convert_to_numpy(first.kernel)[1, 1, 0, 0] == 1.0  # identity-initialised (airbench)
    assert data_fitted_layers(seed_cnn.build(keras=keras)) == []


LOAD = textwrap.dedent(
    """
    import sys
    import cifar_dist, keras, numpy as np
    path, x = sys.argv[1], np.load(sys.argv[2])
    try:
        keras.saving.load_model(path, safe_mode=True)
        print("loaded without registering")
    except Exception as exc:
        print("unregistered:", type(exc).__name__)
    from cifar_dist.evaluation.custom_objects import register_custom_objects
    register_custom_objects(keras)
    model = keras.saving.load_model(path, safe_mode=True)
    np.save(sys.argv[3], model.predict(x, verbose=0))
    print(type(model.optimizer).__name__, type(model.optimizer._learning_rate).__name__,
          float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)))
    """
)


def test_a_keras_3_model_with_the_custom_layers_saves_and_loads_in_safe_mode(images, tmp_path):
    """A fresh process loads the compiled .keras file (layers, SGDW, nested lr schedules) once
    register_custom_objects(keras) has run, with safe_mode=True (no Lambda), and predicts the same."""
    from cifar_dist.training.optimizers import sgdw
    from cifar_dist.training.recipe.schedules import schedule_classes

    _, model = both("airbench", images)
    classes = schedule_classes(keras)
    lr = classes.HorovodLr(
        classes.Triangular(0.2, 100), steps_per_epoch=10, size=2, warmup_epochs=1.5, decay_epochs=[3], decay_factor=0.5
    )
    model.compile(optimizer=sgdw(lr, keras=keras), loss="categorical_crossentropy")
    model.save(tmp_path / "m.keras")
    np.save(tmp_path / "x.npy", images[:8])
    (tmp_path / "load.py").write_text(LOAD)
    proc = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "load.py"),
            str(tmp_path / "m.keras"),
            str(tmp_path / "x.npy"),
            str(tmp_path / "p.npy"),
        ],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_ok(proc)
    assert "unregistered:" in proc.stdout  # what register_custom_objects is for
    optimizer, schedule, value = proc.stdout.splitlines()[-1].split()
    assert (optimizer, schedule) == ("SGDW", "HorovodLr") and float(value) == pytest.approx(float(lr(0)))
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), model.predict(images[:8], verbose=0), rtol=1e-6)


@pytest.mark.parametrize("mode", ["flip", "flip_translate"])
def test_tta_of_a_keras_3_model_gives_the_probabilities_of_keras_2s(mode, images):
    k2, k3 = both("resnet9", images)
    x = images[:8]
    tta2, tta3 = with_tta(k2, mode), with_tta(k3, mode)
    assert flavor_of(tta3) == 3 and not [layer for layer in tta3.layers if type(layer).__name__ == "Lambda"]
    np.testing.assert_allclose(tta3.predict(x, verbose=0), tta2.predict(x, verbose=0), rtol=1e-5, atol=1e-7)
    both2, both3 = plain_and_tta(k2, mode).predict(x, verbose=0), plain_and_tta(k3, mode).predict(x, verbose=0)
    for output in ("plain", "tta"):
        np.testing.assert_allclose(both3[output], both2[output], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(both3["plain"], k3.predict(x, verbose=0), rtol=1e-6)


def test_keras_is_passed_by_the_trainer_never_a_model_option():
    assert takes_keras_argument(airbench.build) and not takes_keras_argument(fit_to_data)
    node = OmegaConf.create({"_target_": "cifar_dist.models.seed_cnn.build", "keras": "keras"})
    assert model_node_problem(node, params_of=signature_parameters) == (
        "model.keras: `keras` is not a model option: the trainer passes the Keras module the model is built with; "
        "remove it from the model config"
    )
    typo = OmegaConf.create({"_target_": "cifar_dist.models.seed_cnn.build", "dense_unit": 3})
    assert model_node_problem(typo, params_of=signature_parameters).endswith(
        "(its parameters: input_shape, conv_dropout, dense_units, dense_dropout)"
    )
    for option in ("seed_cnn", "resnet9", "airbench"):
        assert "keras" not in compose_cfg(f"model={option}").model
        assert "model has no key `keras`" in command_line_problem([f"model={option}", "+model.keras=x"])
