"""The trainer's final test (plain and TTA) in one pass gives the numbers the earlier two passes gave (issue 24).

The reference below is the code path the trainer used before: ``model.evaluate``
for the plain score, then a TTA model calling the trained model once per view
(six calls for flip_translate) combined by Keras layers, compiled and evaluated
again. The package now scores all views stacked in one call and reads the plain
score off the unchanged view; the same weights must give the same numbers.
"""

import numpy as np
import pytest
import tensorflow as tf
from omegaconf import OmegaConf

import cifar_dist  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from cifar_dist.config.schema import DataConfig
from cifar_dist.data import load_dataset
from cifar_dist.data.streams import eval_input
from cifar_dist.models.airbench import build as build_airbench
from cifar_dist.models.tta import views, with_tta
from cifar_dist.training.engines.tf_data_loop import TfDataLoop
from cifar_dist.training.exact_test import evaluate_exact
from cifar_dist.training.recipe import hooks as recipe

pytestmark = pytest.mark.xdist_group("final_test")  # one worker trains trained_looking_model (--dist loadgroup)


class OneRank:
    """An engine of one rank on tf.data: Keras' evaluate (TfDataLoop's), Horovod's object collectives."""

    evaluate = staticmethod(lambda model, stream, outputs=("",): TfDataLoop.evaluate(None, model, stream, outputs))

    @staticmethod
    def allgather_object(obj):
        return [obj]

    @staticmethod
    def exact_test_slice():
        return 0, 1


def reference_tta_model(model, mode):
    """The TTA model as the package built it before issue 24: one call of ``model`` per view."""
    inputs = tf.keras.Input(shape=model.input_shape[1:])
    scored = [
        tf.keras.layers.Lambda(lambda p, w=weight: p * w, dtype="float32")(model(view))
        for weight, view in views(inputs, mode)
    ]
    return tf.keras.Model(inputs, tf.keras.layers.Add(dtype="float32")(scored))


def reference_score(model, stream):
    """The earlier evaluate_exact's numbers for one rank."""
    loss, acc = model.evaluate(stream.dataset, steps=stream.steps, verbose=0)
    return {
        "loss": float(loss),
        "accuracy": round(float(acc) * stream.samples) / stream.samples,
        "correct": round(float(acc) * stream.samples),
        "samples": stream.samples,
    }


@pytest.fixture(scope="module")
def trained_looking_model():
    tf.keras.utils.set_random_seed(7)
    data = load_dataset(OmegaConf.structured(DataConfig(name="sample")))
    model = build_airbench(num_classes=10, widths=[16, 32, 32])
    recipe.fit_to_data(model, data, sample=2000)
    compile_kwargs = dict(loss=recipe.loss(0.2), metrics=["accuracy"])
    model.compile(**compile_kwargs)
    # A few steps so the scores are not those of an untrained net (and BatchNorm statistics move).
    x = data.x_train[:512].astype(np.float32) / 255.0
    model.fit(x, tf.keras.utils.to_categorical(data.y_train[:512], 10), batch_size=64, epochs=1, verbose=0)
    stream = eval_input(data, batch_size=64, rank=0, size=1, equal_shards=False)  # 1017 = 15 x 64 + 57
    return model, compile_kwargs, stream


@pytest.mark.parametrize("mode", ["flip", "flip_translate"])
def test_one_pass_final_test_equals_the_two_pass_one(trained_looking_model, mode):
    model, compile_kwargs, stream = trained_looking_model
    plain_before = reference_score(model, stream)
    old_tta = reference_tta_model(model, mode)
    old_tta.compile(**compile_kwargs)
    tta_before = reference_score(old_tta, stream)

    got = recipe.final_test(
        model, lambda m, outputs=("",): evaluate_exact(m, stream, OneRank, outputs), mode, compile_kwargs
    )

    assert got["test"]["tta"] == mode
    for before, after in ((plain_before, got["test_plain"]), (tta_before, got["test"])):
        assert after["samples"] == before["samples"] == 1017
        assert after["correct"] == before["correct"]
        assert after["accuracy"] == before["accuracy"]
        assert after["loss"] == pytest.approx(before["loss"], rel=1e-6, abs=1e-7)
    assert got["test"]["correct"] != got["test_plain"]["correct"] or got["test"]["loss"] != got["test_plain"]["loss"]


def test_without_tta_the_final_test_is_the_models_own_evaluate(trained_looking_model):
    model, compile_kwargs, stream = trained_looking_model
    got = recipe.final_test(
        model, lambda m, outputs=("",): evaluate_exact(m, stream, OneRank, outputs), "none", compile_kwargs
    )
    assert got == {"test": reference_score(model, stream)}


def test_with_tta_predicts_as_one_call_per_view_did(trained_looking_model):
    model, _, stream = trained_looking_model
    x = next(iter(stream.dataset))[0]
    for mode in ("flip", "flip_translate"):
        np.testing.assert_allclose(
            with_tta(model, mode).predict(x, verbose=0),
            reference_tta_model(model, mode).predict(x, verbose=0),
            rtol=1e-6,
            atol=1e-7,
        )
