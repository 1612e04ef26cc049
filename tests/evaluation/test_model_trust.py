"""A model file someone sent runs none of its code: not when scored, not as a checkpoint to resume from.

The model here has a ``Lambda`` layer whose function creates a marker file,
saved as ``.h5`` the way tf.keras saves any model (the function's bytecode
goes into the file). ``task=evaluate`` refuses it in one line, as a file and
as a run dir's checkpoint, and the marker is never created; with
``evaluate.trust_model=true`` it loads (and the marker appears, which shows
the file really carries code). Resuming from it loads arrays only. One CLI
run shows the refusal as a user sees it; the rest calls what the CLI calls.
"""

import contextlib

import pytest

from helpers.cli import error_lines, run_cli


def save_lambda_model(out, marker) -> None:
    """A tf.keras model whose Lambda layer creates ``marker`` when it runs, saved as .h5 (its bytecode in the file).
    Building it runs the function once: the marker is removed again."""
    import tensorflow as tf

    layers = tf.keras.layers
    model = tf.keras.Sequential(
        [
            layers.Input(shape=(32, 32, 3)),
            # The marker's path is a constant in the bytecode: the function needs nothing from this test (defined
            # in __main__, as a script someone sent defines it).
            layers.Lambda(
                eval(f"lambda x: (__import__('pathlib').Path({str(marker)!r}).touch(), x)[1]", {"__name__": "__main__"})
            ),
            layers.Flatten(),
            layers.Dense(10, activation="softmax"),
        ]
    )
    model.save(out, save_format="h5")
    marker.unlink(missing_ok=True)


def resume_from(path) -> None:
    """What a resume does with a checkpoint: the configured model, restored from the file (arrays only)."""
    import hydra.utils
    from omegaconf import OmegaConf

    from cifar_dist.config.schema import SeedCnnConfig
    from cifar_dist.rundir import checkpoints

    model = hydra.utils.instantiate(OmegaConf.structured(SeedCnnConfig()), num_classes=10)
    model.compile(loss="categorical_crossentropy", optimizer="rmsprop")
    with contextlib.suppress(Exception):  # the Lambda model's arrays do not fit: what matters is that nothing ran
        checkpoints.restore(model, path)


@pytest.mark.filterwarnings("ignore:You are saving your model as an HDF5 file")  # the .h5 is what is tested
def test_a_model_whose_lambda_runs_code_is_refused_unless_trusted(tmp_path):
    """The CLI refuses the file; a run dir holding it as a checkpoint, resuming from it and trusting it are the
    functions the CLI calls, in this process."""
    from cifar_dist.evaluation.inputs import EvaluationInputError, load_model, resolve_model_path

    marker = tmp_path / "code-ran"
    model_file = tmp_path / "lambda.h5"
    save_lambda_model(model_file, marker)
    resume_from(model_file)
    assert not marker.exists(), "resuming from the file ran its code"

    proc = run_cli(
        "task=evaluate",
        f"evaluate.model={model_file}",
        "data=sample",
        f"hydra.run.dir={tmp_path / 'eval'}",
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = error_lines(proc)
    assert len(errors) == 1 and "Lambda" in errors[0] and "evaluate.trust_model=true" in errors[0], proc.stderr[-3000:]
    assert not marker.exists(), "loading the model ran its code"

    tampered_run = tmp_path / "run-sent-to-me"
    (tampered_run / "checkpoints").mkdir(parents=True)
    (tampered_run / "checkpoints" / "checkpoint-001.h5").write_bytes(model_file.read_bytes())
    with pytest.raises(EvaluationInputError) as refused:
        load_model(resolve_model_path(str(tampered_run)), 10)
    assert "Lambda" in str(refused.value) and "evaluate.trust_model=true" in str(refused.value)
    assert not marker.exists(), "loading the run dir's checkpoint ran its code"

    load_model(model_file, 10, trust_model=True)
    assert marker.exists()  # the user opted in: the file's code ran


def test_a_keras3_file_is_read_by_the_same_refusal_rule(tmp_path):
    """Keras 3's .keras zip (config.json) goes through the same check as an .h5: a Lambda is refused before
    Keras reads the file, a model of built-in layers only is not (issue 29)."""
    import keras

    from cifar_dist.evaluation.model_trust import code_in_model_file

    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Flatten()(inputs)
    keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x)).save(tmp_path / "plain.keras")
    x = keras.layers.Lambda(lambda t: t * 2.0)(x)
    keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x)).save(tmp_path / "lambda.keras")

    assert code_in_model_file(tmp_path / "plain.keras") == []
    found = code_in_model_file(tmp_path / "lambda.keras")
    assert found and found[0].startswith("Lambda"), found  # (and its "__lambda__" function object)
