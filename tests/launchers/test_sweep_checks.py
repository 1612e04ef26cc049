"""Bad values and bad folders found before anything starts leave nothing behind, in a sweep as in a single run.

Issue 31: a sweep whose every point had a bad value wrote a multirun dir and named only point #0;
launcher.concurrent=-1 was refused after the sweep and point dirs were made; hydra.sweep.dir at a
folder of other runs listed them all as points; a dry run of 3 points with concurrent=2 said "3
commands written" after printing 2; errors found at a run's start (a missing data path, a failed
download, an empty class folder) left run dirs holding only .hydra/ and a log.
"""

from __future__ import annotations

import pytest

from helpers.cli import assert_ok, error_lines, one_error_line, run_cli
from helpers.sweep_fakes import fake_sweep_env

SAMPLE = ("data=sample", "trainer.verbose=0")


def test_a_sweep_whose_every_point_is_bad_names_each_and_writes_nothing(tmp_path):
    sweep = tmp_path / "new" / "sweep"
    proc = run_cli("-m", "trainer.epochs=0,-1", *SAMPLE, f"hydra.sweep.dir={sweep}", timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = error_lines(proc)
    assert [line.split(" (")[0] for line in lines] == ["cifar_dist: error: point #0", "cifar_dist: error: point #1"]
    assert "trainer.epochs=0 must be >= 1" in lines[0] and "trainer.epochs=-1 must be >= 1" in lines[1]
    assert list(tmp_path.iterdir()) == []  # no sweep dir, not even its parent


def test_launcher_concurrent_minus_one_is_refused_before_any_dir_is_made(tmp_path):
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4",
        *SAMPLE,
        "launcher=mpirun",
        "launcher.concurrent=-1",
        "launcher.dry_run=true",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        timeout=120,
    )
    lines = error_lines(proc)
    assert proc.returncode == 2 and len(lines) == 2 and all("launcher.concurrent=-1" in line for line in lines)
    assert "dry run:" not in proc.stdout and list(tmp_path.iterdir()) == []


def test_a_sweep_dir_holding_other_runs_is_refused_untouched(tmp_path):
    other = tmp_path / "runs" / "12-00-00"
    (other / ".hydra").mkdir(parents=True)
    (other / ".hydra" / "hydra.yaml").write_text("hydra:\n  job:\n    name: cifar_dist\n")
    proc = run_cli("-m", "optimizer.lr=1e-4", *SAMPLE, f"hydra.sweep.dir={tmp_path / 'runs'}", timeout=120)
    assert "is not the dir of a sweep (it holds 12-00-00, no multirun.yaml)" in one_error_line(proc)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["12-00-00"]


@pytest.mark.horovod  # launcher.concurrent splits one mpirun into Horovod groups
def test_a_concurrent_dry_run_counts_the_commands_it_printed(tmp_path):
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4,3e-4",
        *SAMPLE,
        "launcher=mpirun",
        "launcher.np=1",
        "launcher.concurrent=2",
        "launcher.dry_run=true",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        timeout=180,
    )
    assert_ok(proc)
    assert len([line for line in proc.stdout.splitlines() if line.startswith("mpirun ")]) == 2
    assert "dry run: 2 commands for 3 points written, nothing started" in proc.stdout


@pytest.fixture
def empty_class_folder(tmp_path):
    from helpers.cifar_fixtures import random_batches, write_png_tree

    (train,), test = random_batches(n_train_batches=1, per_batch=10, n_test=10)
    root = write_png_tree(tmp_path / "images", {"train": train, "test": test})
    for image in (root / "train" / "cat").iterdir():
        image.unlink()
    return root


def test_an_error_found_at_the_start_leaves_no_run_dir(tmp_path, empty_class_folder):
    """An empty class folder, found as the job loads its data; a missing data path and a failed download are found
    there too and end the same way (the app's ``fail`` removes the run dir it created): their one-line errors are
    tested in-process (tests/data/test_data_own.py, tests/data/test_data_download.py)."""
    proc = run_cli("data=folder", "data.path=images", "trainer.verbose=0", "hydra.run.dir=outputs/run", cwd=tmp_path)
    line = one_error_line(proc)
    assert "holds no images" in line, line
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("sweeper", ["basic", "optuna"])
def test_a_sweep_refused_whole_in_an_earlier_sweeps_dir_puts_its_multirun_yaml_back(tmp_path, sweeper):
    """Issue 57 item 10: the sweeper writes multirun.yaml before the first batch; a batch whose every point is
    refused left the refused command's there, in place of the earlier sweep's description of its points."""
    if sweeper == "optuna":
        pytest.importorskip("optuna")
    sweep = tmp_path / "sweep"
    fake = ("launcher._target_=helpers.sweep_fakes.RecordingLauncher", *SAMPLE, f"hydra.sweep.dir={sweep}")
    search = ("hydra/sweeper=optuna", "hydra.sweeper.n_trials=2") if sweeper == "optuna" else ()
    lrs = "optimizer.lr=choice(0.01,0.02)" if sweeper == "optuna" else "optimizer.lr=0.01,0.02"
    env = fake_sweep_env()
    assert_ok(run_cli("-m", *fake, *search, lrs, env=env, timeout=120))
    before = {p.name: p.read_bytes() for p in sweep.iterdir() if p.is_file()}
    refused = run_cli("-m", *fake, *search, lrs, "trainer.epochs=-1", env=env, timeout=120)
    assert refused.returncode == 2 and len(error_lines(refused)) == 2, refused.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in sweep.iterdir() if p.is_file()} == before  # multirun.yaml included
