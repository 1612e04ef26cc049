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
    # The same run dir scored with data named on the command line says "as the command says": test_evaluate's
    # one_rank_eval is that run (test_scores_the_saved_model_as_training_reported).


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


def horovod_run_dir(root, keras: int):
    """A run dir of the horovod stack as it arrives elsewhere: its saved config (engine=horovod) and its model."""
    from omegaconf import OmegaConf

    from helpers.cli import compose_cfg

    run = root / f"keras{keras}"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(
        compose_cfg("engine=horovod", f"engine.keras={keras}", "data=sample"), run / ".hydra" / "config.yaml"
    )
    (run / "saved_models").mkdir()
    (run / "saved_models" / "keras_cifar10_trained_model.h5").write_bytes(b"not read before the engine is chosen")
    return run


@pytest.mark.jax_stack
def test_a_horovod_run_scored_without_tensorflow_is_one_line_saying_what_to_do(monkeypatch, tmp_path):
    """Issue 57, item 3: evaluating a run trained on the horovod stack, on the jax stack, started the TensorFlow
    engine anyway (a ``ModuleNotFoundError`` traceback)."""
    from cifar_dist.config.schema import typed
    from cifar_dist.evaluation.run_data import EngineMissing, evaluation_engine
    from helpers.cli import compose_cfg
    from helpers.no_horovod import as_the_jax_stack

    runs = {keras: horovod_run_dir(tmp_path, keras) for keras in (2, 3)}
    cfgs = {keras: typed(compose_cfg("task=evaluate", f"evaluate.model={run}")) for keras, run in runs.items()}
    models = {keras: run / "saved_models" / "keras_cifar10_trained_model.h5" for keras, run in runs.items()}
    as_the_jax_stack(monkeypatch)
    for keras, instead in (
        (2, "Keras 2 (tf.keras) one, which only TensorFlow loads"),
        (3, "score it on JAX: engine=jax"),
    ):
        with pytest.raises(EngineMissing) as refused:
            evaluation_engine(cfgs[keras], models[keras], [f"evaluate.model={runs[keras]}"])
        line = str(refused.value)
        assert line.startswith(f"{models[keras]} was trained on engine=horovod, which scores it on TensorFlow")
        assert "(the jax stack)" in line and "tensorflow extra" in line and instead in line, line
    assert evaluation_engine(cfgs[3], models[3], ["engine=jax"]) == "jax"  # what the line says to do


@pytest.mark.jax_stack
def test_the_jax_stack_refuses_a_horovod_run_in_one_line_for_real(tmp_path):
    """The same in a process where TensorFlow cannot be imported (``env_without_tensorflow``), as the CLI runs."""
    from helpers.cli import one_error_line
    from helpers.no_horovod import env_without_tensorflow

    run = horovod_run_dir(tmp_path, 2)
    site = tmp_path / "site"
    site.mkdir()
    out = tmp_path / "scored"
    proc = run_cli("task=evaluate", f"evaluate.model={run}", f"hydra.run.dir={out}", env=env_without_tensorflow(site))
    line = one_error_line(proc)
    assert "was trained on engine=horovod" in line and "(the jax stack)" in line and not out.exists(), line
