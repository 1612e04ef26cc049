"""task=evaluate: scoring a trained model, sharded over ranks, with exact single-rank counts."""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from helpers.cli import assert_ok, cli_env, compose_cfg, error_lines, read_metrics, run_cli
from helpers.paths import REPO

pytestmark = pytest.mark.xdist_group("evaluate")  # one worker scores one_rank_eval (make test: --dist loadgroup)


def evaluation(run_dir):
    return json.loads((run_dir / "evaluation.json").read_text())


@pytest.fixture(scope="module")
def one_rank_eval(trained_run, tmp_path_factory):
    train_dir, _ = trained_run
    out = tmp_path_factory.mktemp("eval") / "one"
    proc = run_cli("task=evaluate", f"evaluate.model={train_dir}", "data=sample", f"hydra.run.dir={out}")
    assert_ok(proc)
    return out, proc


def test_scores_the_saved_model_as_training_reported(trained_run, one_rank_eval):
    train_dir, _ = trained_run
    out, proc = one_rank_eval
    ev = evaluation(out)
    test = read_metrics(train_dir)["test"]
    assert ev["model"].endswith("saved_models/keras_cifar10_trained_model.h5")
    assert ev["data"] == "data=sample, as the command says"  # named on the command line, over the run dir's data
    assert ev["samples"] == ev["labelled"] == 1017
    assert ev["correct"] == round(test["accuracy"] * 1017)  # Keras reports a float32 mean
    assert ev["accuracy"] == pytest.approx(test["accuracy"], abs=1e-6)
    assert ev["loss"] == pytest.approx(test["loss"], rel=1e-4)
    matrix = np.array(ev["confusion_matrix"]["matrix"])
    assert matrix.shape == (10, 10) and matrix.sum() == 1017
    assert np.trace(matrix) == ev["correct"] == round(ev["accuracy"] * 1017)
    assert sum(c["total"] for c in ev["per_class"].values()) == 1017
    assert (out / "confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"
    with open(out / "predictions.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1017 and [int(r["index"]) for r in rows] == list(range(1017))
    assert sum(r["label"] == r["predicted"] for r in rows) == ev["correct"]
    assert all(0.0 < float(r["confidence"]) <= 1.0 for r in rows)
    assert "Test accuracy:" in proc.stdout
    # The closing line says where every output is, not only evaluation.json.
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f"cifar_dist: wrote {out}/: ")
    assert {"evaluation.json", "confusion_matrix.png", "predictions.csv"} <= set(last.split(": ", 2)[2].split(", "))


@pytest.mark.mpi
@pytest.mark.horovod
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_two_ranks_give_the_same_counts(trained_run, one_rank_eval, tmp_path):
    train_dir, _ = trained_run
    one, _ = one_rank_eval
    out = tmp_path / "two"
    cmd = ["mpirun", "-np", "2", "--bind-to", "core"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    cmd += ["-x", "CIFAR_DIST_CHILD", "-x", "TF_CPP_MIN_LOG_LEVEL", "-x", "PATH"]
    cmd += [
        sys.executable,
        "-m",
        "cifar_dist",
        "task=evaluate",
        f"evaluate.model={train_dir}",
        "data=sample",
        f"hydra.run.dir={out}",
        "hydra.output_subdir=null",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=cli_env(CIFAR_DIST_CHILD="1"), capture_output=True, text=True, timeout=600)
    assert_ok(proc)
    a, b = evaluation(one), evaluation(out)
    assert b["ranks"] == 2 and a["ranks"] == 1
    assert b["confusion_matrix"] == a["confusion_matrix"]
    assert b["per_class"] == a["per_class"] and b["correct"] == a["correct"]
    assert (out / "predictions.csv").read_text().count("\n") == 1018


def test_scores_a_checkpoint_and_a_folder_of_images(trained_run, tmp_path):
    train_dir, _ = trained_run
    from omegaconf import OmegaConf
    from PIL import Image

    import cifar_dist  # noqa: F401
    from cifar_dist.config.schema import DataConfig
    from cifar_dist.data import load_dataset

    data = load_dataset(OmegaConf.structured(DataConfig(name="sample")))
    folder = tmp_path / "images"
    names = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    for i in range(20):
        target = folder / names[data.y_test[i]] if i < 15 else folder  # 5 unlabelled at the top level
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(data.x_test[i]).save(target / f"img{i:02d}.png")
    out = tmp_path / "out"
    checkpoint = train_dir / "checkpoints" / "checkpoint-003.h5"
    proc = run_cli("task=evaluate", f"evaluate.model={checkpoint}", f"evaluate.input={folder}", f"hydra.run.dir={out}")
    assert_ok(proc)
    ev = evaluation(out)
    assert ev["samples"] == 20 and ev["labelled"] == 15 and ev["model"] == str(checkpoint)
    with open(out / "predictions.csv") as f:
        rows = list(csv.DictReader(f))
    unlabelled = [r for r in rows if r["label"] == ""]
    assert len(unlabelled) == 5 and all("/" not in r["source"] for r in unlabelled)


def test_a_missing_model_is_one_line(tmp_path):
    """What the CLI makes of an evaluation input it cannot use: exit 2, one line, no traceback."""
    proc = run_cli("task=evaluate", f"hydra.run.dir={tmp_path / 'out'}", f"evaluate.model={tmp_path / 'nope'}")
    assert proc.returncode == 2
    errors = error_lines(proc)
    assert len(errors) == 1 and "no such file or directory" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("case", ["not_a_model", "unreadable_image"])
def test_bad_inputs_give_one_line(case, tmp_path):
    """The other inputs an evaluation refuses, read as the task reads them, in this process: each a CifarDistError of
    one line, which the CLI prints as ``test_a_missing_model_is_one_line`` sees."""
    from PIL import Image

    from cifar_dist.common.errors import CifarDistError
    from cifar_dist.evaluation.inputs import load_images, load_model

    bad, folder = tmp_path / "model.h5", tmp_path / "imgs"
    bad.write_text("this is not HDF5")
    folder.mkdir()
    Image.new("RGB", (64, 48)).save(folder / "big.png")  # any size is resized, as in training (data=folder)
    (folder / "notes.png").write_text("not an image")
    with pytest.raises(CifarDistError) as refused:
        if case == "not_a_model":
            load_model(bad, 10)
        else:
            load_images(str(folder), compose_cfg("task=evaluate", f"evaluate.input={folder}").data, ())
    expect = {
        "not_a_model": "not a loadable Keras model",
        "unreadable_image": f"an image file cannot be read: {folder / 'notes.png'} (cannot identify image file",
    }[case]
    line = str(refused.value)
    assert expect in line and "\n" not in line, line
