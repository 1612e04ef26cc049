"""Options of a user's own in the checkout's git-ignored ``conf/local/<group>/<name>.yaml`` (issue 22).

``python -m cifar_dist model=local_tiny`` finds ``conf/local/model/local_tiny.yaml`` as it finds an
option of a ``--config-dir``: the launching command puts ``conf/local`` on Hydra's search path
(``app.with_local_options``), so it composes, is checked against the builder's signature, and is
carried to every rank and job like any search path. The tests write their options into the real
``conf/local`` (as a user would; it is git-ignored) and remove exactly what they wrote.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from cifar_dist.config.files import holds_options, local_dir
from cifar_dist.launchers.user_sources import with_searchpath
from helpers.cli import assert_ok, error_lines, one_error_line, run_cli
from helpers.fake_azureml.fixtures import aml_env, aml_overrides
from helpers.user_project import (
    DATA_YAML,
    MODEL_YAML,
    QUIET,
    WIDTH,
    assert_trained_the_users_model,
    needs_mpirun,
    write_user_project,
)

LOCAL = ("model=local_tiny", "data=local_mine")


@pytest.fixture
def local_options():
    """``write(rel, text)``: a file under ``conf/local``; every file written is removed afterwards (and every
    folder the test made). A file already there is a user's own: the test stops rather than touch it."""
    written, made = [], []

    def write(rel: str, text: str) -> Path:
        path = local_dir() / rel
        assert not path.exists(), f"{path} exists (a user's own file): remove or rename it to run this test"
        missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]  # deepest first
        path.parent.mkdir(parents=True, exist_ok=True)
        made.extend(reversed(missing))
        path.write_text(text)
        written.append(path)
        return path

    yield write
    for path in written:
        path.unlink(missing_ok=True)
    for folder in reversed(made):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


@pytest.fixture
def project(tmp_path, local_options) -> Path:
    """The user's modules in a folder outside the checkout; their options in conf/local, not in a config dir."""
    folder = write_user_project(tmp_path / "project")
    local_options("model/local_tiny.yaml", MODEL_YAML)
    local_options("data/local_mine.yaml", DATA_YAML)
    return folder


def _searchpath_value(override: str) -> list:
    return OverridesParser.create().parse_override(override).value()


# ---- the command line's search path ------------------------------------------------------------
def test_conf_local_goes_last_on_the_search_path_once():
    local = Path("/co de/it's/conf/local")
    uri = f"file://{local}"
    (added,) = with_searchpath([], local)
    assert _searchpath_value(added) == [uri]  # a path with a space and a quote survives Hydra's parser
    overrides = with_searchpath(["hydra.searchpath=[file:///a,pkg://b.c]", "model=x"], local)
    assert overrides[1] == "model=x" and _searchpath_value(overrides[0]) == ["file:///a", "pkg://b.c", uri]
    assert with_searchpath(overrides, local) == overrides  # a rank's (or a resumed) command line: unchanged
    # A primary config's own search path (a value on the command line replaces it): kept, then ours.
    assert _searchpath_value(with_searchpath(["model=x"], local, inherited=["file:///p"])[1]) == ["file:///p", uri]
    assert with_searchpath(["hydra.searchpath=[oops"], local) == ["hydra.searchpath=[oops"]  # Hydra says why


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--cfg", "job"], ["SP", "--cfg", "job"]),
        (["--info"], ["SP", "--info"]),  # not after it: --info takes an optional value
        (["-cd", "c", "model=x", "--cfg", "job"], ["-cd", "c", "model=x", "SP", "--cfg", "job"]),
        (["-m", "model=x", "hydra.searchpath=[file:///a]"], ["-m", "model=x", "SP"]),
    ],
)
def test_the_launching_command_line_gets_it_where_hydra_reads_overrides(local_options, argv, expected):
    from cifar_dist.app import with_local_options

    local_options("model/local_probe.yaml", "_target_: m.build\n")
    argv = with_local_options(argv)
    (at,) = [i for i, a in enumerate(argv) if a.startswith("hydra.searchpath=")]
    assert [("SP" if i == at else a) for i, a in enumerate(argv)] == expected
    assert _searchpath_value(argv[at])[-1] == f"file://{local_dir()}"


def test_without_local_options_the_command_line_is_as_given(tmp_path, monkeypatch):
    import cifar_dist.app as app

    monkeypatch.setattr(app, "local_dir", lambda: tmp_path)  # settings only: default.yaml
    (tmp_path / "default.yaml").write_text("# @package _global_\n")
    assert app.with_local_options(["model=x", "--cfg", "job"]) == ["model=x", "--cfg", "job"]


def test_only_group_folders_with_yaml_count_as_options(tmp_path):
    (tmp_path / "default.yaml").write_text("# @package _global_\n")
    (tmp_path / "model").mkdir()
    assert not holds_options(tmp_path) and not holds_options(tmp_path / "absent")
    (tmp_path / "model" / "mine.yaml").write_text("_target_: m.build\n")
    assert holds_options(tmp_path)


def test_local_dir_is_beside_the_package_configs():
    assert (local_dir().parent / "config.yaml").is_file()


# ---- composed and checked like any option --------------------------------------------------------
def test_a_local_option_composes_with_its_arguments_and_overrides(project):
    proc = assert_ok(run_cli(*LOCAL, f"model.width={WIDTH}", "--cfg", "job", cwd=project, timeout=120))
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["model"]["_target_"] == "mymodels.build" and cfg["model"]["width"] == WIDTH
    assert cfg["data"]["_target_"] == "mydata.make"


def test_a_misspelt_argument_of_a_local_option_is_one_line_and_writes_nothing(project):
    proc = run_cli(*LOCAL, "model.widht=4", cwd=project, timeout=120)
    errors = error_lines(proc)
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
    assert "mymodels.build has no parameter `widht`; did you mean `width`?" in errors[0]
    assert not (project / "outputs").exists()


def test_a_users_primary_config_keeps_its_own_search_path(project):
    (project / "more" / "optimizer").mkdir(parents=True)
    (project / "more" / "optimizer" / "quick.yaml").write_text("defaults:\n  - sgd\n  - _self_\nlr: 0.01\n")
    (project / "myconf" / "myrun.yaml").write_text(
        f"defaults:\n  - config\n  - _self_\nhydra:\n  searchpath:\n    - file://{project / 'more'}\n"
    )
    proc = assert_ok(
        run_cli(
            "--config-dir",
            "myconf",
            "--config-name",
            "myrun",
            *LOCAL,
            "optimizer=quick",
            "--cfg",
            "job",
            cwd=project,
            timeout=120,
        )
    )
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["optimizer"]["lr"] == 0.01 and cfg["model"]["_target_"] == "mymodels.build"


def test_a_yaml_error_in_conf_local_is_one_line_when_used_and_a_warning_otherwise(local_options, tmp_path):
    """issue 31 (hostile 11): a broken option nobody selects blocked every command."""
    broken = local_options("model/local_broken.yaml", "_target_: [unclosed\n")
    proc = run_cli("model=local_broken", "--cfg", "job", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"cifar_dist: error: {broken}, line 2") and "fix that file" in proc.stderr
    for argv in (("--cfg", "job"), ("--help",)):
        proc = run_cli(*argv, cwd=tmp_path, timeout=120)
        assert_ok(proc)
        assert proc.stderr.count("\n") == 1, proc.stderr[-3000:]
        assert proc.stderr.startswith(f"cifar_dist: warning: {broken}, line 2") and "model=local_broken" in proc.stderr


@pytest.mark.parametrize(
    "text", ["conv_dropout: 0.9\n", "conv_dropout: 0.9\nmine: 1\n"], ids=["same-keys", "other-keys"]
)
def test_a_local_option_named_like_a_built_in_one_is_refused_in_one_line(local_options, tmp_path, text):
    """issue 31 (hostile 11): conf/local/model/seed_cnn.yaml changed every default run silently, or (with a key
    seed_cnn lacks) broke every command, --help included, with a 97-line traceback."""
    shadow = local_options("model/seed_cnn.yaml", text)
    for argv in (("--cfg", "job"), ("--help",), ("model=resnet9", "--cfg", "job")):
        line = one_error_line(run_cli(*argv, cwd=tmp_path, timeout=120))
        assert f"{shadow} has the name of cifar_dist's own option model=seed_cnn" in line and "rename it" in line


def test_the_docs_own_batchai_launcher_option_leaves_other_launchers_alone(local_options, tmp_path):
    """issue 31 (hostile 11): docs/batchai.md's conf/local/default.yaml (`launcher: {workspace: ...}`) broke every
    launcher=local run; its suggestion is now a launcher option of the user's own, as written there."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "batchai.md").read_text()
    yaml_text = doc.split("```yaml\n# conf/local/launcher/my_batchai.yaml\n", 1)[1].split("```", 1)[0]
    local_options("launcher/my_batchai.yaml", yaml_text)
    mine = yaml.safe_load(assert_ok(run_cli("launcher=my_batchai", "--cfg", "job", cwd=tmp_path, timeout=120)).stdout)
    assert mine["launcher"]["workspace"] == "my-workspace" and mine["launcher"]["_target_"].endswith("BatchAILauncher")
    plain = yaml.safe_load(assert_ok(run_cli("--cfg", "job", cwd=tmp_path, timeout=120)).stdout)
    assert plain["launcher"]["_target_"].endswith("LocalLauncher")


def test_help_lists_local_and_search_path_options_under_their_groups(project):
    (project / "more" / "optimizer").mkdir(parents=True)
    (project / "more" / "optimizer" / "quick.yaml").write_text("defaults:\n  - sgd\n  - _self_\nlr: 0.01\n")
    proc = assert_ok(run_cli("--help", f"hydra.searchpath=[file://{project / 'more'}]", cwd=project, timeout=120))
    groups = dict(
        line.split(": ", 1)
        for line in proc.stdout.split("== Config groups (group=option) ==\n", 1)[1].split("\n\n", 1)[0].splitlines()
    )
    assert groups["model"] == "airbench, local_tiny, resnet9, seed_cnn"  # conf/local's, with the built-in ones
    assert groups["optimizer"] == "adam, quick, rmsprop, sgd, sgdw"  # a hydra.searchpath dir's
    assert "local_mine" in groups["data"] and not [g for g in groups if g.startswith(("local/", "hydra"))]


# ---- carried to the ranks and into a job's snapshot ---------------------------------------------
@needs_mpirun
@pytest.mark.horovod  # two ranks of a Keras 2 model
def test_two_mpirun_ranks_train_a_local_option(project, tmp_path):
    run_dir = tmp_path / "runs" / "mpirun"
    assert_ok(
        run_cli(
            *LOCAL,
            f"model.width={WIDTH}",
            *QUIET,
            "trainer.epochs=1",
            "trainer.epoch_policy=shard",
            "launcher=mpirun",
            "launcher.np=2",
            f"hydra.run.dir={run_dir}",
            cwd=project,
            timeout=600,
        )
    )
    assert_trained_the_users_model(run_dir, 2, 1)


def test_an_azureml_job_carries_conf_local_in_its_snapshot(project, fake_aml, snapshot_cache, tmp_path):
    run_dir = tmp_path / "run"
    args = [
        a
        for a in aml_overrides(fake_aml, run_dir, snapshot_cache, **{"launcher.dry_run": "true"})
        if not a.startswith("data=")
    ]
    assert_ok(run_cli(*LOCAL, *args, cwd=project, env=aml_env(fake_aml), timeout=120))
    assert fake_aml.requests == []
    doc = yaml.safe_load((run_dir / "azureml" / "job.yml").read_text())
    code = Path(doc["code"])
    assert (code / "user" / "conf" / "0" / "model" / "local_tiny.yaml").read_text() == MODEL_YAML
    assert (code / "user" / "code" / "mymodels.py").is_file()
    command = shlex.split(doc["command"])
    assert "hydra.searchpath=[file://user/conf/0]" in command and "model=local_tiny" in command
    assert str(local_dir()) not in doc["command"]
