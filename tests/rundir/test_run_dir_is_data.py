"""A run dir is data, not code, and stays whole (issue 47, items 2 and 3).

Evaluating, re-running or resuming a run dir imports no code its ``.hydra/`` names without the user's trust, and
nothing from inside it (``rundir/run_code.py``: ``evaluation/run_data.py``, ``saved_run.py``,
``rundir/resume_policy.py``); no other task writes over a training run's record (``resume_policy.refuse_other_task``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.cli import compose_cfg, one_error_line, run_cli

PAYLOAD = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")


def make(seed, **kwargs):
    pathlib.Path({marker!r}).write_text("called")
    raise SystemExit("the payload ran")
"""


def write_payload(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PAYLOAD.format(marker=str(marker)))


def received_run(trained_run, folder: Path, factory: str) -> Path:
    """A copy of a trained run dir (its config and saved model) whose saved data names ``factory``, as sent."""
    sent = folder / "sent_run"
    shutil.copytree(trained_run, sent, ignore=shutil.ignore_patterns("checkpoints", ".cifar_dist*", "*.log"))
    saved = sent / ".hydra" / "config.yaml"
    cfg = OmegaConf.load(saved)
    cfg.data = {"name": "custom", "_target_": factory, "kwargs": {}}
    OmegaConf.save(cfg, saved)
    return sent


def test_evaluating_a_sent_run_dir_never_runs_the_code_it_names(trained_run, tmp_path):
    """As reported: the README's evaluate of a received run dir, run from the folder holding it, imported and
    called the payload its .hydra/config.yaml named. Untrusted: refused naming the module; trusted, but inside the
    run dir: refused all the same. The payload never runs."""
    marker = tmp_path / "payload-ran"
    write_payload(tmp_path / "their.py", marker)  # beside the run dir, in the cwd python -m puts on sys.path
    received_run(trained_run[0], tmp_path, "their.make")
    line = one_error_line(
        run_cli("task=evaluate", "evaluate.model=sent_run", f"hydra.run.dir={tmp_path / 'ev'}", cwd=tmp_path)
    )
    assert f"data._target_=their.make (module their, {tmp_path / 'their.py'})" in line, line
    assert "evaluate.trust_run_code=true" in line and not marker.exists()

    write_payload(tmp_path / "sent_run" / "payload.py", marker)  # the issue's: the payload came with the run dir
    received_run(trained_run[0], tmp_path / "again", "sent_run.payload.make")
    trusted = run_cli(
        "task=evaluate",
        "evaluate.model=sent_run",
        "evaluate.trust_run_code=true",
        f"hydra.run.dir={tmp_path / 'ev'}",
        cwd=tmp_path / "again",
    )
    line = one_error_line(trusted)
    assert "sent_run.payload" in line and "lies inside the run dir sent_run" in line, line
    assert not marker.exists() and not (tmp_path / "ev").exists()


def test_trusted_run_code_outside_the_run_dir_is_taken_and_said(tmp_path, monkeypatch):
    """evaluate.trust_run_code=true takes the run's factory (imported later, by the data's loader) and says so."""
    from cifar_dist.config.schema import typed
    from cifar_dist.evaluation.run_data import evaluation_data

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(compose_cfg("data=custom", "data._target_=their.make"), run / ".hydra" / "config.yaml")
    write_payload(tmp_path / "code" / "their.py", tmp_path / "ran")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    model = run / "saved_models" / "keras_cifar10_trained_model.h5"
    command = ["task=evaluate", f"evaluate.model={run}"]
    cfg = typed(compose_cfg(*command, "evaluate.trust_run_code=true"))
    used, said = evaluation_data(cfg, model, command)
    assert used.data._target_ == "their.make" and said.endswith(
        "; imports their, as evaluate.trust_run_code=true allows"
    )
    assert not (tmp_path / "ran").exists()  # checked, not imported: the data's loader imports it
    with pytest.raises(Exception, match=r"data._target_=their.make \(module their, .*their.py\); refusing"):
        evaluation_data(typed(compose_cfg(*command)), model, command)


def saved_run_folder(folder: Path, *recorded: str) -> Path:
    """A run dir's .hydra/ as a re-run reads it: hydra.yaml and the recorded overrides."""
    hydra = folder / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "hydra.yaml").write_text("hydra: {}\n")
    OmegaConf.save(OmegaConf.create(list(recorded)), hydra / "overrides.yaml")
    return hydra


@pytest.mark.parametrize(
    "recorded",
    [
        "data._target_=sent_run.payload.make",
        "+hydra.callbacks.x._target_=their.Callback",
        "+optimizer={_target_:their.opt,lr:0.1}",
        "evaluate.trust_model=true",
        "evaluate.trust_run_code=true",
        "hydra.searchpath=[file://sent_run/conf]",
    ],
)
def test_a_rerun_takes_no_code_or_trust_from_the_overrides_a_run_recorded(tmp_path, monkeypatch, recorded):
    """The README's re-run (--config-path <run>/.hydra) re-applied every recorded override: a _target_, a callback
    or a grant of trust that came with the run. Refused in one line that lists it; given by the command, it runs."""
    from cifar_dist.common.errors import CifarDistError
    from cifar_dist.saved_run import from_saved_run

    monkeypatch.chdir(tmp_path)
    hydra = saved_run_folder(tmp_path / "sent_run", "data=sample", recorded)
    argv = ["--config-path", str(hydra), "--config-name", "config", "trainer.epochs=1"]
    with pytest.raises(CifarDistError) as refused:
        from_saved_run(argv)
    assert str(refused.value).startswith(f"{hydra / 'overrides.yaml'} names code or trust that re-running it would")
    assert recorded.split("=")[0] in str(refused.value) and "\n" not in str(refused.value)
    assert recorded in from_saved_run([*argv, recorded])  # the user's own override: their trust
    harmless = saved_run_folder(tmp_path / "own", "data=sample", "hydra.searchpath=[file:///elsewhere/conf]")
    assert from_saved_run(["--config-path", str(harmless), "--config-name", "config"])[:2] == [
        "data=sample",
        "hydra.searchpath=[file:///elsewhere/conf]",
    ]


def test_a_resume_imports_nothing_from_inside_its_run_dir(tmp_path, monkeypatch):
    """A resume composes the command's config; a _target_ of it whose module lies inside the run dir it resumes
    is refused before anything imports it."""
    from cifar_dist.rundir.resume_policy import check_rerun
    from cifar_dist.rundir.run_code import RunCodeRefused

    run = tmp_path / "sent_run"
    write_payload(run / "payload.py", tmp_path / "ran")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "checkpoint-001.h5").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = compose_cfg("data=custom", "data._target_=sent_run.payload.make")
    (run / ".hydra").mkdir()
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    with pytest.raises(RunCodeRefused, match="named by the command, lies inside the run dir"):
        check_rerun(run, cfg)
    assert not (tmp_path / "ran").exists()


def record(run_dir: Path) -> dict:
    """Every file of a run dir but its lock files (taken by a command before it is refused), by content."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and ".lock" not in p.name
    }


def test_an_evaluation_into_the_training_runs_own_dir_is_refused_and_the_record_stays_whole(trained_run, tmp_path):
    """As reported: task=evaluate with hydra.run.dir at the run dir replaced its three .hydra/*.yaml; the training
    command was then refused and the run could not be scored on its data."""
    run = tmp_path / "run"
    shutil.copytree(trained_run[0], run, ignore=shutil.ignore_patterns("checkpoints"))
    before = record(run)
    line = one_error_line(run_cli("task=evaluate", f"evaluate.model={run}", f"hydra.run.dir={run}"))
    assert f"{run} holds a training run, and task=evaluate into it would replace that run's record" in line
    assert line.endswith(f"write beside it: hydra.run.dir={tmp_path / 'run-evaluate'}")
    assert record(run) == before


def test_an_evaluations_own_dir_may_be_evaluated_into_again(tmp_path):
    from cifar_dist.rundir.resume_policy import ResumeConflict, check_rerun

    ev = tmp_path / "ev"
    (ev / ".hydra").mkdir(parents=True)
    cfg = compose_cfg("task=evaluate", "evaluate.model=x")
    OmegaConf.save(cfg, ev / ".hydra" / "config.yaml")
    check_rerun(ev, cfg)  # an earlier evaluation's record is the evaluation's to replace
    OmegaConf.save(compose_cfg(), ev / ".hydra" / "config.yaml")  # a training job's, killed before its first epoch
    with pytest.raises(ResumeConflict, match="holds a training run"):
        check_rerun(ev, cfg)


# --- issue 57, item 16: a received run dir whose saved config was edited or damaged -----------------------------


def malformed_run(folder: Path, **edits) -> Path:
    """A run dir as received: a saved config (edited with ``edits``, dotted keys), a checkpoint and a saved model."""
    run = folder / "received"
    (run / ".hydra").mkdir(parents=True)
    cfg = OmegaConf.to_container(compose_cfg("data=sample", "engine=horovod"), resolve=False)
    saved = OmegaConf.create(cfg)
    for key, value in edits.items():
        OmegaConf.update(saved, key, value, force_add=True)
    OmegaConf.save(saved, run / ".hydra" / "config.yaml")
    for name in ("checkpoints/checkpoint-001.h5", "saved_models/keras_cifar10_trained_model.h5"):
        (run / name).parent.mkdir(exist_ok=True)
        (run / name).write_bytes(b"not read: the config is checked first")
    return run


MALFORMED = {
    "engine-target": ({"engine._target_": "x"}, "engine._target_: Key '_target_' not in 'HorovodEngineConfig'"),
    "folder-target": (
        {"data": {"name": "folder", "path": "/nowhere", "_target_": None}},
        "data._target_: Key '_target_' not in 'FolderDataConfig'",
    ),
    "wrong-type": ({"data.augment.translate": "big"}, "data.augment.translate: Value 'big' of type 'str' could not be"),
}


@pytest.mark.parametrize("edits, said", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_saved_config_is_one_line_naming_the_file_and_key_wherever_it_is_read(edits, said, tmp_path):
    """Re-run (a resume: engine=auto keeps the checkpoints' engine, the resume policy compares) or evaluated, it
    gave a 22-line ``ConfigKeyError`` traceback, and Hydra let the run-dir guard fail open."""
    from cifar_dist.config.schema import typed
    from cifar_dist.evaluation.run_data import evaluation_data, evaluation_engine
    from cifar_dist.rundir.resume_policy import check_rerun
    from cifar_dist.rundir.saved_config import SavedConfigError
    from cifar_dist.training.engines.choice import trained_engine

    run = malformed_run(tmp_path, **edits)
    model = run / "saved_models" / "keras_cifar10_trained_model.h5"
    cfg = typed(compose_cfg("task=evaluate", f"evaluate.model={run}"))
    calls = {
        "trained_engine": lambda: trained_engine(run),
        "check_rerun": lambda: check_rerun(run, compose_cfg("data=sample", "engine=horovod")),
        "evaluation_engine": lambda: evaluation_engine(cfg, model, [f"evaluate.model={run}"]),
        "evaluation_data": lambda: evaluation_data(cfg, model, [f"evaluate.model={run}"]),
    }
    for name, call in calls.items():
        with pytest.raises(SavedConfigError) as refused:
            call()
        assert str(refused.value).startswith(f"{run}/.hydra/config.yaml: {said}"), (name, str(refused.value))
        assert "\n" not in str(refused.value)


def test_the_cli_says_it_in_one_line_and_the_received_run_dir_stays_as_it_was(tmp_path):
    run = malformed_run(tmp_path, **{"engine._target_": "x"})
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    out = tmp_path / "scored"
    for proc in (
        run_cli("task=evaluate", f"evaluate.model={run}", f"hydra.run.dir={out}"),
        run_cli("data=sample", f"hydra.run.dir={run}"),  # a resume into it
    ):
        line = one_error_line(proc)
        assert line.startswith(f"cifar_dist: error: {run}/.hydra/config.yaml: engine._target_: Key"), line
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before and not out.exists()
