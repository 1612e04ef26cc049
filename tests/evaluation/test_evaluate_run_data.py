"""task=evaluate scores a run dir's model on that run's data unless the command names other data, and images
are read by one rule in training and scoring (issue 31, new user 1 and 3). cifar_dist/evaluation/run_data.py."""

from __future__ import annotations

import json

import pytest

from helpers.cifar_fixtures import sample_arrays, write_png_tree
from helpers.cli import assert_ok, cli_env, run_cli


def _evaluation(out):
    return json.loads((out / "evaluation.json").read_text())


def test_a_run_dir_is_scored_on_the_data_it_was_trained_on_and_says_so(trained_run, tmp_path):
    """As reported: a data=sample (debug=fast) run evaluated as the README says tried to download CIFAR-10."""
    train_dir, _ = trained_run
    offline = cli_env(HOME=str(tmp_path / "home"))  # an empty data cache: the default data=cifar10 would download
    proc = assert_ok(
        run_cli(
            "task=evaluate", f"evaluate.model={train_dir}", f"hydra.run.dir={tmp_path / 'ev'}", env=offline, timeout=300
        )
    )
    ev = _evaluation(tmp_path / "ev")
    assert ev["samples"] == 1017 and "packaged sample" in ev["input"]
    assert ev["data"].startswith(f"data=sample, as the run that trained it ({train_dir}/.hydra/config.yaml)")
    assert f"data: {ev['data']}" in proc.stdout + proc.stderr
    other = assert_ok(
        run_cli(
            "task=evaluate",
            f"evaluate.model={train_dir}",
            "data=sample",
            "data.augment.enabled=false",
            f"hydra.run.dir={tmp_path / 'ev2'}",
            env=offline,
            timeout=300,
        )
    )
    assert _evaluation(tmp_path / "ev2")["data"] == "data=sample, as the command says", other.stdout[-2000:]


@pytest.fixture(scope="module")
def big_tree(tmp_path_factory):
    """3 classes of the sample's real pixels, scaled to 64x64 (nearest): training resizes them to 32x32."""
    x, y, (x_test, y_test) = sample_arrays(per_batch=40)
    keep, keep_test = y < 3, y_test < 3

    def big(images):
        return images.repeat(2, axis=1).repeat(2, axis=2)

    return write_png_tree(
        tmp_path_factory.mktemp("big"),
        {"train": (big(x[keep]), y[keep]), "test": (big(x_test[keep_test]), y_test[keep_test])},
    )


def test_a_folder_trained_model_scores_its_images_without_repeating_the_data(big_tree, tmp_path):
    """As reported: batch-scoring needed data=folder data.path=... again, and refused the 64x64 images training took."""
    run = tmp_path / "run"
    assert_ok(
        run_cli(
            "data=folder",
            f"data.path={big_tree}",
            "trainer.epochs=1",
            "trainer.batch_size=16",
            "trainer.plot=false",
            "trainer.verbose=0",
            f"hydra.run.dir={run}",
            timeout=600,
        )
    )
    assert_ok(run_cli("task=evaluate", f"evaluate.model={run}", f"hydra.run.dir={tmp_path / 'split'}"))
    assert_ok(
        run_cli(
            "task=evaluate",
            f"evaluate.model={run}",
            f"evaluate.input={big_tree / 'test'}",
            f"hydra.run.dir={tmp_path / 'folder'}",
        )
    )
    split, folder = _evaluation(tmp_path / "split"), _evaluation(tmp_path / "folder")
    assert split["data"].startswith("data=folder, as the run that trained it")
    assert (
        folder["confusion_matrix"]["classes"]
        == split["confusion_matrix"]["classes"]
        == ["airplane", "automobile", "bird"]
    )
    # the same files, decoded and resized by the same decoder: the same scores
    assert folder["samples"] == split["samples"] and folder["correct"] == split["correct"]
    assert folder["loss"] == pytest.approx(split["loss"], rel=1e-5)


def test_which_data_the_command_and_the_run_dir_decide(tmp_path):
    from omegaconf import OmegaConf

    from cifar_dist.config.schema import typed
    from cifar_dist.evaluation.run_data import evaluation_data
    from helpers.cli import compose_cfg

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(
        compose_cfg("data=folder", "data.path=/pics", "data.image_size=48", "trainer.seed=9"),
        run / ".hydra" / "config.yaml",
    )
    cfg = typed(compose_cfg("task=evaluate", f"evaluate.model={run}"))
    model = run / "checkpoints" / "checkpoint-002.h5"
    used, said = evaluation_data(cfg, model, ["task=evaluate", f"evaluate.model={run}"])
    assert (used.data.name, used.data.path, used.data.image_size, used.trainer.seed) == ("folder", "/pics", 48, 9)
    assert used.data.bad_files.value == "refuse" and said.startswith("data=folder, as the run that trained it")
    for named in (["data=sample"], ["data.path=/x"], ["+data.kwargs.n=1"], ["~data.augment"]):
        assert evaluation_data(cfg, model, named) == (cfg, "data=cifar10, as the command says")
    assert evaluation_data(cfg, model, None)[1] == "data=cifar10, as the config given says"
    elsewhere = tmp_path / "model.h5"
    assert evaluation_data(cfg, elsewhere, [])[1].startswith("data=cifar10 (the default: ")
