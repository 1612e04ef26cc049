"""The README's "Your own model and data", done exactly as it reads, in a directory outside the checkout.

Every fenced block of that section is taken from the README: a block whose
first line is ``# <path>`` is written to that path, every ``python -m
cifar_dist`` line of its ``bash`` block is run in order (train one epoch,
resume to the second, evaluate), and its ``text`` block's command must fail
with exactly the error line shown. A change to the README that breaks what
it tells a user breaks this test.

The one file the README leaves to the user, ``mydata.npz``, is made here from
the packaged sample's real CIFAR-10 pixels (the first 256 images of each of
its four train batches and 256 test images) to keep the runs short.
"""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.cifar_fixtures import sample_batches
from helpers.cli import assert_ok, cli_env, one_error_line, read_metrics, run_cli
from helpers.paths import REPO

SECTION = "## Your own model and data"
SCORED = 8  # images in my_images/


def section() -> str:
    text = (REPO / "README.md").read_text("utf-8")
    assert SECTION in text, f"the README has no section {SECTION!r}"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def blocks(kind: str):
    return re.findall(rf"```{kind}\n(.*?)```", section(), re.S)


def readme_files() -> dict:
    """``path -> text`` of every block whose first line is ``# <path>``."""
    files = {}
    for kind in ("python", "yaml"):
        for block in blocks(kind):
            first = block.splitlines()[0]
            assert first.startswith("# "), f"a {kind} block of the section names no file: {first!r}"
            files[first[2:].strip()] = block
    return files


def readme_commands():
    """The argv after ``python -m cifar_dist`` of every command of the section's bash block."""
    (block,) = blocks("bash")
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    assert all(c[:3] == ["python", "-m", "cifar_dist"] for c in commands), commands
    return [c[3:] for c in commands]


def readme_refusal():
    """The command and the error line of the section's ``text`` block (``$ command``, then its output)."""
    (block,) = blocks("text")
    command, error = block.strip().splitlines()
    assert command.startswith("$ python -m cifar_dist ")
    return shlex.split(command[2:])[3:], error


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user")
    assert REPO not in folder.parents
    files = readme_files()
    assert {"mymodels.py", "mydata.py", "myconf/model/mine.yaml"} <= set(files)
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    train, (x_test, y_test) = sample_batches(per_batch=256)
    np.savez(
        folder / "mydata.npz",
        x_train=np.concatenate([x for x, _ in train]),
        y_train=np.concatenate([y for _, y in train]),
        x_test=x_test,
        y_test=y_test,
    )
    (folder / "my_images").mkdir()
    for i, image in enumerate(x_test[:SCORED]):  # the user's own unlabelled images to batch-score
        Image.fromarray(np.asarray(image, np.uint8)).save(folder / "my_images" / f"photo-{i}.png")
    return folder


def test_the_readme_trains_resumes_evaluates_and_batch_scores_a_users_model(user_dir):
    train, resume, evaluate, score = readme_commands()
    env = cli_env()
    assert_ok(run_cli(*train, cwd=user_dir, env=env))
    run = user_dir / "outputs" / "mine"
    assert (run / "checkpoints" / "checkpoint-001.h5").is_file() and not read_metrics(run).get("complete")
    assert_ok(run_cli(*resume, cwd=user_dir, env=env))
    assert "resuming after epoch 1" in (run / "cifar_dist.log").read_text()
    m = read_metrics(run)
    assert m["complete"] and m["test"]["samples"] == 256 and m["run"]["class_names"] == [str(i) for i in range(10)]
    assert_ok(run_cli(*evaluate, cwd=user_dir, env=env))
    ev = json.loads((user_dir / "outputs" / "mine-eval" / "evaluation.json").read_text())
    assert ev["labelled"] == 256 and ev["correct"] == m["test"]["correct"]  # the saved model, custom layer and all
    assert_ok(run_cli(*score, cwd=user_dir, env=env))
    with open(user_dir / "outputs" / "mine-scores" / "predictions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(Path(r["source"]).name for r in rows) == sorted(f"photo-{i}.png" for i in range(SCORED))
    assert all(
        r["predicted_name"] in m["run"]["class_names"] and r["label"] == "" and 0 < float(r["confidence"]) <= 1
        for r in rows
    ), rows[:2]
    # Without model=mine nothing names the user's module: the same model is refused, its code not run.
    others = [a for a in evaluate if a != "model=mine" and not a.startswith("hydra.run.dir=")]
    refused = run_cli(*others, f"hydra.run.dir={user_dir / 'refused'}", cwd=user_dir, env=env)
    assert "holds layers that run Python code when loaded (mymodels>Scale 'scale'); refusing" in one_error_line(refused)


@pytest.mark.mpi
@pytest.mark.horovod
def test_the_readmes_keras3_option_runs_the_same_commands_and_names_its_keras_files(user_dir):
    """Issue 37, items 10 and 11: ``mine3.yaml`` as the README gives it takes ``model.width=32`` (an option with
    only a ``_target_`` failed with Hydra's 'Key width is not in struct'), and the resume names the ``.keras``
    checkpoint it restores (it named a ``checkpoint-001.h5`` that does not exist)."""
    assert "myconf/model/mine3.yaml" in readme_files()
    train, resume = (["model=mine3" if a == "model=mine" else a for a in c] for c in readme_commands()[:2])
    train, resume = ([a.replace("outputs/mine", "outputs/mine3") for a in c] for c in (train, resume))
    env = cli_env()
    assert_ok(run_cli(*train, "trainer.verbose=0", "trainer.plot=false", cwd=user_dir, env=env))
    run = user_dir / "outputs" / "mine3"
    assert (run / "checkpoints" / "checkpoint-001.keras").is_file()
    assert_ok(run_cli(*resume, "trainer.verbose=0", "trainer.plot=false", cwd=user_dir, env=env))
    log = (run / "cifar_dist.log").read_text()
    assert f"resuming after epoch 1 from {run / 'checkpoints' / 'checkpoint-001.keras'}" in log, log[-2000:]
    assert ".h5" not in log, log[-2000:]


@pytest.mark.horovod  # two ranks of the README's Keras 2 model
def test_on_two_ranks_the_readmes_first_command_trains_one_epoch_of_two_as_it_says(user_dir):
    """On 2 ranks ``trainer.epochs=2`` is one epoch (epoch_policy=divide): the README names what to add there."""
    (extra,) = re.findall(r"add `(launcher=mpirun launcher.np=2 [^`]*)` to both", " ".join(section().split()))
    train = [a for a in readme_commands()[0] if not a.startswith(("trainer.epochs=", "hydra.run.dir="))]
    assert_ok(run_cli(*train, *extra.split(), "hydra.run.dir=outputs/mine-2", cwd=user_dir, env=cli_env()))
    m = read_metrics(user_dir / "outputs" / "mine-2")
    assert m["ranks"] == 2 and m["run"]["epochs"] == 2 and [e["epoch"] for e in m["epochs"]] == [1]
    assert not m["complete"]


def test_the_readme_refusal_is_what_a_user_sees(user_dir):
    argv, error = readme_refusal()
    proc = run_cli(*argv, cwd=user_dir, env=cli_env(), timeout=120)
    assert one_error_line(proc) == error
    assert not (user_dir / "outputs" / "runs").exists()  # no run dir was created for it
