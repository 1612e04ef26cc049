"""The sweep launcher (hydra/launcher=cifar_dist, the project's default for -m).

Hydra's own launcher test suites run against it (their test apps have no
``launcher`` group: every point runs in-process, as with Hydra's basic
launcher). Then, with the project's config and a recording launcher: points
reach their launcher in ONE launch_all call per launcher config, after their
run dirs and .hydra/ exist; each point's accuracy goes back to Hydra in order;
a failed point is FAILED with one line while every other point still runs,
and the sweep summary is written all the same.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite
from hydra.version import VersionBase

from cifar_dist.all_options import register_configs
from cifar_dist.common.sweep_errors import PointFailed

TESTS = Path(__file__).resolve().parent

register_configs()  # hydra/launcher=cifar_dist and the plugin class, as the app does
ConfigStore.instance().store(
    group="launcher", name="recording", node={"_target_": "helpers.sweep_fakes.RecordingLauncher", "np": 1}
)


@pytest.fixture(autouse=True)
def unset_hydra_version_base():
    """Each test here starts with Hydra's version_base unset, as in a fresh process.

    Hydra keeps the version_base of the last app initialised in the process in a
    process-global singleton (hydra.version.VersionBase, in Singleton._instances);
    a cifar_dist compose earlier in the session (version_base="1.3") leaves it at
    1.3. Hydra's own suites expect it unset (1.1 compatibility: their apps'
    hydra.job.chdir defaults to True), so without this 6 of LauncherTestSuite's
    tests fail. The previous value is put back afterwards.
    """
    saved = Singleton._instances.pop(VersionBase, None)
    yield
    Singleton._instances.pop(VersionBase, None)
    if saved is not None:
        VersionBase.set_instance(saved)


@pytest.mark.parametrize("launcher_name, overrides", [("cifar_dist", [])])
class TestHydraLauncherSuite(LauncherTestSuite):
    pass


def _with_registration(cmd, filename):
    # The test app is a plain Hydra app: register the launcher first, as cifar_dist's app does.
    return [cmd[0], str(TESTS / "hydra_app_with_cifar_dist_launcher.py"), *cmd[1:]]


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [({}, ["-m", "hydra/launcher=cifar_dist"])])
class TestHydraIntegrationSuite(IntegrationTestSuite):
    def generate_custom_cmd(self):
        return _with_registration


def _sweep(hydra_sweep_runner, tmp_path, *overrides):
    return hydra_sweep_runner(
        calling_file=None,
        calling_module="cifar_dist.app",
        config_path="conf",
        config_name="config",
        task_function=lambda cfg: float(cfg.optimizer.lr) * 100,  # in-process points
        overrides=["data=sample", *overrides],
        temp_dir=tmp_path,
    )


def _calls(sweep_dir: Path):
    return [json.loads(line) for line in (sweep_dir / "launch_all.jsonl").read_text().splitlines()]


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_points_reach_their_launcher_together_and_accuracies_come_back_in_order(hydra_sweep_runner, tmp_path):
    sweep = _sweep(hydra_sweep_runner, tmp_path, "launcher=local,recording", "optimizer.lr=0.1,0.2")
    with sweep:  # (the runner deletes its temp dir on exit)
        (batch,) = sweep.returns
        # local points ran in-process (task function), the recording ones in one launch_all.
        assert [r.return_value for r in batch] == pytest.approx([10.0, 20.0, 1.0, 2.0])
        assert batch[2].overrides == ["data=sample", "launcher=recording", "optimizer.lr=0.1"]
        assert _calls(tmp_path) == [{"jobs": [2, 3], "prepared": [True, True]}]
        for num in range(4):
            assert (tmp_path / str(num) / ".hydra" / "overrides.yaml").is_file()
        rows = list(csv.DictReader(open(tmp_path / "sweep_summary.csv")))
        assert [(r["job"], r["status"], r["test_accuracy"]) for r in rows][2:] == [
            ("2", "ok", "1.0"),
            ("3", "ok", "2.0"),
        ]


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_a_failed_point_is_failed_in_one_line_after_every_point_ran(hydra_sweep_runner, tmp_path, capsys):
    sweep = _sweep(hydra_sweep_runner, tmp_path, "launcher=recording", "optimizer.lr=0.1,0.9", "launcher.np=1,2")
    with pytest.raises(PointFailed, match=r"^point #2 failed \(exit 3\): lr 0.9 too high$"):
        with sweep:
            pass
    # Two launcher configs (np=1, np=2): one launch_all each, every point launched.
    assert _calls(tmp_path) == [{"jobs": [0, 2], "prepared": [True, True]}, {"jobs": [1, 3], "prepared": [True, True]}]
    rows = list(csv.DictReader(open(tmp_path / "sweep_summary.csv")))
    assert [r["status"] for r in rows] == ["ok", "ok", "failed", "failed"]  # written though the sweep failed
    assert "Sweep summary" in capsys.readouterr().out


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_a_point_with_a_bad_value_fails_alone_before_its_launcher_runs(hydra_sweep_runner, tmp_path):
    sweep = _sweep(hydra_sweep_runner, tmp_path, "launcher=recording", "trainer.batch_size=0,32", "optimizer.lr=0.1")
    with pytest.raises(PointFailed, match=r"^point #0: .*trainer.batch_size=0 must be >= 1"):
        with sweep:
            pass
    assert _calls(tmp_path) == [{"jobs": [1], "prepared": [True]}]
    assert json.loads((tmp_path / "1" / "metrics.json").read_text())["test"]["accuracy"] == 1.0


def test_the_default_hydra_launcher_is_ours(tmp_path):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == "hydra_plugins.cifar_dist_launcher.cifar_dist_launcher.CifarDistLauncher"
    assert "sweep_summary" not in cfg.hydra.callbacks  # the launcher writes the summary


def test_the_app_raises_for_a_failed_in_process_point(tmp_path):
    """A failed in-process point raises PointFailed (Hydra: FAILED, one line, exit 1); it does
    not exit the sweep: the next point still runs (and fails on its own: nothing to resume)."""
    from helpers.cli import run_cli

    proc = run_cli(
        "-m", "trainer.epochs=0,1", "trainer.resume=true", "data=sample", f"hydra.sweep.dir={tmp_path}", timeout=300
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert "point #0: bad config: trainer.epochs=0 must be >= 1" in lines  # Hydra prints it as one line
    assert "Error executing job with overrides: ['trainer.epochs=0', 'trainer.resume=True', 'data=sample']" in lines
    assert "Traceback" not in proc.stderr
    assert "point #1: " in (tmp_path / "1" / "cifar_dist.log").read_text()  # it ran, and failed alone
