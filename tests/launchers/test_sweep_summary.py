"""The sweep summary read from run dirs laid out as Hydra writes them (no training)."""

import csv
import json
from pathlib import Path

from omegaconf import OmegaConf

from cifar_dist.launchers.sweep_summary import collect, summarize, table


def make_point(sweep_dir: Path, num: int, overrides, metrics=None) -> Path:
    job_dir = sweep_dir / str(num)
    (job_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(
        OmegaConf.create({"hydra": {"job": {"num": num}, "overrides": {"task": list(overrides)}}}),
        job_dir / ".hydra" / "hydra.yaml",
    )
    if metrics is not None:
        (job_dir / "metrics.json").write_text(json.dumps(metrics))
    return job_dir


def metrics(acc, loss, complete=True, epochs=2):
    return {
        "test": {"loss": loss, "accuracy": acc},
        "images_per_sec": 400.0 + acc,
        "wall_time_s": 30.5,
        "ranks": 2,
        "complete": complete,
        "epochs": [{"epoch": e + 1, "val_accuracy": acc * (e + 1) / epochs, "loss": 2.0} for e in range(epochs)],
    }


def read_png(path: Path):
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(path)


def curves(ax) -> dict:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


# The tables below are today's output of sweep.table for these points, checked by hand
# (two spaces between columns, each as wide as its widest cell, "-" for what a point lacks).
LR_TABLE = """\
#   overrides          status      test_acc  test_loss  img/s  wall_s  ranks  epochs
--  -----------------  ----------  --------  ---------  -----  ------  -----  ------
0   optimizer.lr=1e-4  ok          0.2500    2.0000     400.2  30.5    2      2
1   optimizer.lr=2e-4  ok          0.3100    1.9000     400.3  30.5    2      2
2   optimizer.lr=4e-4  incomplete  -         -          400.0  30.5    2      1
10  optimizer.lr=8e-4  failed      -         -          -      -       -      0"""

TWO_KEYS_TABLE = """\
#  overrides                             status  test_acc  test_loss  img/s  wall_s  ranks  epochs
-  ------------------------------------  ------  --------  ---------  -----  ------  -----  ------
0  optimizer=adam trainer.batch_size=32  ok      0.2000    2.1000     400.2  30.5    2      2
1  optimizer=sgd trainer.batch_size=64   ok      0.3000    2.0000     400.3  30.5    2      2"""

EVALUATE_TABLE = """\
#  overrides            status  test_acc  test_loss  img/s  wall_s  ranks  epochs
-  -------------------  ------  --------  ---------  -----  ------  -----  ------
0  evaluate.model=run0  ok      0.6100    1.1000     -      3.0     2      0
1  evaluate.model=run1  ok      0.5800    1.1000     -      3.0     2      0"""


def test_summary_table_csv_and_plot(tmp_path, capsys, saved_figures):
    common = ["data=sample", "launcher=mpirun", "launcher.np=2"]
    make_point(tmp_path, 0, ["optimizer.lr=1e-4", *common], metrics(0.25, 2.0))
    make_point(tmp_path, 1, ["optimizer.lr=2e-4", *common], metrics(0.31, 1.9))
    make_point(
        tmp_path, 2, ["optimizer.lr=4e-4", *common], metrics(0.0, 0.0, complete=False, epochs=1) | {"test": None}
    )
    make_point(tmp_path, 10, ["optimizer.lr=8e-4", *common])  # failed before writing metrics
    (tmp_path / "10" / "logs").mkdir()  # a child run dir without .hydra/ is not a point

    points = summarize(tmp_path)
    assert [p.num for p in points] == [0, 1, 2, 10]  # numeric order, not "10" < "2"
    assert [p.status for p in points] == ["ok", "ok", "incomplete", "failed"]

    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    header = next(line for line in lines if line.startswith("#"))
    assert header.split() == ["#", "overrides", "status", "test_acc", "test_loss", "img/s", "wall_s", "ranks", "epochs"]
    row1 = next(line for line in lines if line.startswith("1 "))
    assert row1.split() == ["1", "optimizer.lr=2e-4", "ok", "0.3100", "1.9000", "400.3", "30.5", "2", "2"]
    assert "launcher.np=2" not in out  # common overrides are left out of the table
    assert next(line for line in lines if line.startswith("10 ")).split()[2:4] == ["failed", "-"]

    rows = list(csv.DictReader(open(tmp_path / "sweep_summary.csv")))
    assert [r["varied"] for r in rows] == [
        "optimizer.lr=1e-4",
        "optimizer.lr=2e-4",
        "optimizer.lr=4e-4",
        "optimizer.lr=8e-4",
    ]
    assert rows[1]["overrides"] == "optimizer.lr=2e-4 data=sample launcher=mpirun launcher.np=2"
    assert float(rows[0]["test_accuracy"]) == 0.25 and rows[3]["test_accuracy"] == ""
    assert Path(rows[0]["output_dir"]) == tmp_path / "0"
    png = (tmp_path / "sweep_summary.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert f"\n{LR_TABLE}\n" in out

    # The figure: accuracy against the one varied number (points without a test result left out),
    # and one learning curve per point that has one, labelled with its number and overrides.
    assert read_png(tmp_path / "sweep_summary.png").shape[:2] == (450, 1200)  # 12 x 4.5 in at 100 dpi
    (fig,) = saved_figures
    left, right = fig.axes
    (acc,) = left.get_lines()
    assert list(acc.get_xdata()) == [1e-4, 2e-4] and list(acc.get_ydata()) == [0.25, 0.31]
    assert left.get_xlabel() == "optimizer.lr" and left.get_xscale() == "linear"  # 2x range: not log
    assert curves(right) == {
        "#0 optimizer.lr=1e-4": ([1, 2], [0.125, 0.25]),
        "#1 optimizer.lr=2e-4": ([1, 2], [0.155, 0.31]),
        "#2 optimizer.lr=4e-4": ([1], [0.0]),
    }
    assert [t.get_text() for t in right.get_legend().get_texts()] == list(curves(right))


def test_points_with_several_varied_keys_get_a_bar_chart(tmp_path, saved_figures):
    make_point(tmp_path, 0, ["optimizer=adam", "trainer.batch_size=32"], metrics(0.2, 2.1))
    make_point(tmp_path, 1, ["optimizer=sgd", "trainer.batch_size=64"], metrics(0.3, 2.0))
    summarize(tmp_path)
    assert (tmp_path / "sweep_summary.png").stat().st_size > 10_000
    assert "optimizer=sgd trainer.batch_size=64" in table(collect(tmp_path))
    assert table(collect(tmp_path)) == TWO_KEYS_TABLE
    assert read_png(tmp_path / "sweep_summary.png").shape[:2] == (450, 1200)
    (fig,) = saved_figures
    left, right = fig.axes
    assert [bar.get_height() for bar in left.patches] == [0.2, 0.3]
    assert [t.get_text() for t in left.get_xticklabels()] == ["#0", "#1"] and left.get_lines() == []
    assert list(curves(right)) == ["#0 optimizer=adam trainer.batch_size=32", "#1 optimizer=sgd trainer.batch_size=64"]


def test_evaluate_points_are_summarized_from_evaluation_json(tmp_path):
    for num, acc in ((0, 0.61), (1, 0.58)):
        job_dir = make_point(tmp_path, num, [f"evaluate.model=run{num}", "task=evaluate"])
        (job_dir / "evaluation.json").write_text(
            json.dumps({"accuracy": acc, "loss": 1.1, "ranks": 2, "wall_time_s": 3.0, "samples": 1017})
        )
    points = collect(tmp_path)
    assert [(p.status, p.test_accuracy, p.ranks) for p in points] == [("ok", 0.61, 2), ("ok", 0.58, 2)]
    assert "0.6100" in table(points) or "0.610" in table(points)
    assert table(points) == EVALUATE_TABLE


def test_a_dry_run_sweep_reports_dry_run_points_not_failures(tmp_path, caplog):
    """``-m ... launcher.dry_run=true`` through the CLI: both commands, points ``dry_run``, one closing line."""
    from helpers.cli import assert_ok, run_cli

    sweep = tmp_path / "sweep"
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4",
        "launcher=mpirun",
        "launcher.np=2",
        "launcher.dry_run=true",
        "data=sample",
        f"hydra.sweep.dir={sweep}",
        timeout=180,
    )
    assert_ok(proc)
    out = proc.stdout + proc.stderr
    assert len([line for line in proc.stdout.splitlines() if line.startswith("mpirun ")]) == 2
    assert proc.stdout.count("Dry run: the mpirun command for ") == 2
    assert [r["status"] for r in csv.DictReader(open(sweep / "sweep_summary.csv"))] == ["dry_run", "dry_run"]
    assert "dry run: 2 commands written, nothing started" in proc.stdout
    assert "did not complete" not in out and "failed" not in out


def test_a_dry_run_counts_what_its_launcher_says_it_writes():
    """Each launcher says what its dry run writes (``dry_run_writes``): a cluster's, a job; the others, a command.
    The summary asks the class a point's saved launcher node names (its ``_target_``)."""
    from cifar_dist.launchers.sweep_summary import dry_run_line, dry_run_writes
    from helpers.cli import compose_cfg

    for name in ("local", "mpirun", "gloo", "slurm", "azureml", "batchai"):
        launcher = OmegaConf.to_container(compose_cfg(f"launcher={name}").launcher)
        assert dry_run_writes(launcher) == ("job" if name in ("slurm", "azureml", "batchai") else "command"), name
    assert dry_run_writes({}) == dry_run_writes({"_target_": "gone.Launcher"}) == "command"
    assert dry_run_line(["job"]) == "dry run: 1 job written, nothing started"
    assert (
        dry_run_line(["job", "command", "command"], 2)
        == "dry run: 2 command/jobs for 3 points written, nothing started"
    )
