"""A model file someone sent runs none of its code: not when scored, not as a checkpoint to resume from.

The model here has a ``Lambda`` layer whose function creates a marker file,
saved as ``.h5`` the way tf.keras saves any model (the function's bytecode
goes into the file). ``task=evaluate`` refuses it in one line, as a file and
as a run dir's checkpoint, and the marker is never created; with
``evaluate.trust_model=true`` it loads (and the marker appears, which shows
the file really carries code). Resuming from it loads arrays only.
"""

import subprocess
import sys

from helpers.cli import assert_ok, cli_env, error_lines, run_cli
from helpers.paths import REPO

MAKE_LAMBDA_MODEL = """
import sys
import tensorflow as tf
out, marker = sys.argv[1], sys.argv[2]
layers = tf.keras.layers
model = tf.keras.Sequential([
    layers.Input(shape=(32, 32, 3)),
    # The marker's path is a constant in the bytecode: the function needs nothing from this script.
    layers.Lambda(eval(f"lambda x: (__import__('pathlib').Path({marker!r}).touch(), x)[1]")),
    layers.Flatten(),
    layers.Dense(10, activation="softmax"),
])
model.save(out, save_format="h5")
"""

RESUME_FROM_IT = """
# Resume: the configured model, restored from the file (arrays only).
import pathlib, sys
pathlib.Path(sys.argv[2]).unlink(missing_ok=True)  # building and saving the model ran it once
from omegaconf import OmegaConf
import hydra.utils
from cifar_dist.config.schema import SeedCnnConfig
from cifar_dist.rundir import checkpoints
model = hydra.utils.instantiate(OmegaConf.structured(SeedCnnConfig()), num_classes=10)
model.compile(loss="categorical_crossentropy", optimizer="rmsprop")
try:
    checkpoints.restore(model, sys.argv[1])  # the Lambda model's file: its arrays do not fit
except Exception as exc:
    print("not restored:", type(exc).__name__)
print("ran" if pathlib.Path(sys.argv[2]).exists() else "did not run")
"""


def python(script, *args):
    proc = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        cwd=REPO,
        env=cli_env(TF_USE_LEGACY_KERAS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_ok(proc)
    return proc


def test_a_model_whose_lambda_runs_code_is_refused_unless_trusted(tmp_path):
    marker = tmp_path / "code-ran"
    model_file = tmp_path / "lambda.h5"
    python(MAKE_LAMBDA_MODEL + RESUME_FROM_IT, model_file, marker)
    assert not marker.exists(), "resuming from the file ran its code"

    tampered_run = tmp_path / "run-sent-to-me"
    (tampered_run / "checkpoints").mkdir(parents=True)
    (tampered_run / "checkpoints" / "checkpoint-001.h5").write_bytes(model_file.read_bytes())

    for model in (model_file, tampered_run):
        proc = run_cli(
            "task=evaluate", f"evaluate.model={model}", "data=sample", f"hydra.run.dir={tmp_path / 'eval'}", timeout=300
        )
        assert proc.returncode == 2, proc.stderr[-3000:]
        errors = error_lines(proc)
        assert len(errors) == 1 and "Lambda" in errors[0] and "evaluate.trust_model=true" in errors[0], proc.stderr[
            -3000:
        ]
        assert not marker.exists(), "loading the model ran its code"

    trusted = run_cli(
        "task=evaluate",
        f"evaluate.model={model_file}",
        "data=sample",
        "evaluate.trust_model=true",
        f"hydra.run.dir={tmp_path / 'eval-trusted'}",
        timeout=300,
    )
    assert marker.exists(), trusted.stderr[-3000:]  # the user opted in: the file's code ran


KERAS3_FILES = r"""
import sys
import cifar_dist, keras
inputs = keras.Input((32, 32, 3))
x = keras.layers.Flatten()(inputs)
plain = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
plain.save(sys.argv[1] + "/plain.keras")
x = keras.layers.Lambda(lambda t: t * 2.0)(x)
keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x)).save(sys.argv[1] + "/lambda.keras")
"""


def test_a_keras3_file_is_read_by_the_same_refusal_rule(tmp_path):
    """Keras 3's .keras zip (config.json) goes through the same check as an .h5: a Lambda is refused before
    Keras reads the file, a model of built-in layers only is not (issue 29)."""
    proc = subprocess.run(
        [sys.executable, "-c", KERAS3_FILES, str(tmp_path)],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_ok(proc)
    from cifar_dist.evaluation.model_trust import code_in_model_file

    assert code_in_model_file(tmp_path / "plain.keras") == []
    found = code_in_model_file(tmp_path / "lambda.keras")
    assert found and found[0].startswith("Lambda"), found  # (and its "__lambda__" function object)
