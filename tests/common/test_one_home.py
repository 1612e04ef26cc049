"""Issue 32 item 4: a concept decided in one place. The sweep summary's CSV goes through the one atomic writer
(a failed rewrite leaves the previous table whole); the package and its ranks apply one TF_USE_LEGACY_KERAS rule."""

import subprocess
import sys
from pathlib import Path

import pytest

from cifar_dist.common.atomic_files import is_temp_name
from cifar_dist.launchers import sweep_summary
from cifar_dist.launchers.ranks.rank_env import rank_environment
from helpers.cli import assert_ok, cli_env


def test_a_failed_rewrite_of_the_sweep_csv_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    path = tmp_path / sweep_summary.CSV_NAME
    point = sweep_summary.Point(num=0, output_dir=tmp_path / "0", overrides=["a=1"], status="ok", test_accuracy=0.5)
    sweep_summary.write_csv([point], path)
    before = path.read_text()

    class Broken:
        def __init__(self, f):
            self.f = f

        def writerow(self, row):
            self.f.write("half a row")
            raise OSError("disk gone")

    monkeypatch.setattr(sweep_summary.csv, "writer", Broken)
    with pytest.raises(OSError):
        sweep_summary.write_csv([point, point], path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir() if is_temp_name(p.name)] == []


@pytest.mark.parametrize("value, expected", [(None, "1"), ("", "1"), ("0", "0"), ("1", "1")])
def test_the_package_and_its_ranks_decide_tf_use_legacy_keras_alike(value, expected):
    env = cli_env()
    env.pop("TF_USE_LEGACY_KERAS", None)
    if value is not None:
        env["TF_USE_LEGACY_KERAS"] = value
    package = subprocess.run(
        [sys.executable, "-c", "import os, cifar_dist; print(os.environ['TF_USE_LEGACY_KERAS'])"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_ok(package)
    ranks = rank_environment(environ=env)["TF_USE_LEGACY_KERAS"]
    assert (package.stdout.strip(), ranks) == (expected, expected)


def test_a_folder_replaced_is_whole_at_every_point(tmp_path, monkeypatch):
    """atomic_files.replace_dir (the extracted CIFAR-10 folder's publication): the old folder stays under its name
    until the new one is complete and renamed; a crash at the rename leaves the old one whole, aside or in place."""
    from cifar_dist.common import atomic_files

    target, staged = tmp_path / "cifar-10-batches-py", tmp_path / "staging"
    target.mkdir()
    (target / "data_batch_1").write_text("old")
    staged.mkdir()
    (staged / "data_batch_1").write_text("new")
    real_rename = atomic_files.os.rename

    def crash_on_the_new_one(src, dst):
        if Path(src) == staged:
            raise OSError("killed")
        real_rename(src, dst)

    monkeypatch.setattr(atomic_files.os, "rename", crash_on_the_new_one)
    with pytest.raises(OSError):
        atomic_files.replace_dir(staged, target)
    kept = [p for p in tmp_path.rglob("data_batch_1") if p.read_text() == "old"]
    assert kept and (staged / "data_batch_1").read_text() == "new"  # nothing lost: old aside, new still staged
    monkeypatch.setattr(atomic_files.os, "rename", real_rename)
    atomic_files.replace_dir(staged, target)
    assert (target / "data_batch_1").read_text() == "new" and not staged.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".old")] == []
