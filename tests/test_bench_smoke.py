"""scripts/bench_training.py in its quickest mode produces its table, JSON and plots."""
import json
import subprocess
import sys

import pytest

from conftest import REPO, cli_env


@pytest.mark.slow
def test_smoke_benchmark_writes_table_json_and_plots(tmp_path):
    # Only this test runs the seed reference, whose ImageDataGenerator needs scipy; the others run anywhere.
    pytest.importorskip("scipy", reason="the seed reference's ImageDataGenerator needs scipy (pip install -e .[bench])")
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_training.py"), "--smoke", "--out", str(tmp_path), "--work", str(tmp_path / "runs")],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "benchmark_results.json").read_text())
    rows = {r["variant"]: r for r in summary["rows"]}
    assert set(rows) == {"seed", "bare", "cifar_dist_1"}
    assert all(r["ok"] and r["images_per_sec"] > 0 for r in rows.values())
    assert rows["seed"]["images_per_sec_vs_seed"] == pytest.approx(1.0)
    assert rows["cifar_dist_1"]["peak_rss_mb"] > 100 and rows["seed"]["peak_rss_mb"] > 100
    assert 0 <= summary["target_accuracy"] <= 1
    assert set(summary["pipeline_images_per_sec"]) == {"seed_flow", "seed_flow_4_workers", "cifar_dist"}
    table = (tmp_path / "benchmark_results.md").read_text()
    assert "| seed reference" in table and "× seed" in table
    for png in ("benchmark_throughput.png", "benchmark_accuracy.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_dirs_are_absolute_whatever_the_work_flag_says(tmp_path, monkeypatch):
    # Variants run with their run dir as cwd; a relative --work once sent bare Keras' result.json
    # and cifar_dist's run dir to paths nested under themselves, and every such variant "failed".
    sys.path.insert(0, str(REPO / "scripts"))
    from bench_training import command, variant_table, work_dir

    monkeypatch.chdir(tmp_path)
    work = work_dir("outputs/bench/x")
    assert work == tmp_path / "outputs" / "bench" / "x"
    for name in ("seed", "bare", "cifar_dist_1"):
        cmd = command(variant_table(2)[name], "sample", 1, work / f"{name}-rep0")
        paths = [arg.split("=", 1)[-1] for arg in cmd if str(work) in arg]
        assert paths and all(p.startswith("/") for p in paths), cmd


def test_report_reads_steady_rates_time_to_accuracy_and_targets():
    sys.path.insert(0, str(REPO / "scripts"))
    from bench_report import summarise

    def run(name, ranks, rates, accs, seconds=10.0):
        return {"variant": name, "label": name, "ranks": ranks, "ok": True, "test_accuracy": accs[-1],
                "peak_rss_mb_per_rank": [500.0] * ranks,
                "epochs": [{"images_per_sec": r, "epoch_seconds": seconds, "val_accuracy": a} for r, a in zip(rates, accs)]}

    results = [
        run("seed", 1, [100, 400, 500, 600], [0.2, 0.3, 0.4, 0.5]),
        run("cifar_dist_1", 1, [50, 800, 900, 1000], [0.3, 0.5, 0.6, 0.6]),
        run("cifar_dist_N", 2, [50, 1700, 1700, 1700], [0.3, 0.4, 0.5, 0.6]),
        run("fast", 2, [50, 2000], [0.55, 0.7], seconds=5.0),
    ]
    s = summarise(results, [{"ok": True, "images_per_sec": {"seed_flow": 2000.0, "cifar_dist": 20000.0}}], {
        "date": "d", "machine": {"cpu": "c", "cores": 2, "tensorflow": "t"}, "data": "sample", "seed_epochs": 4,
        "epochs": 4, "reps": 1})
    rows = {r["variant"]: r for r in s["rows"]}
    assert rows["seed"]["images_per_sec"] == 500  # the first epoch (tracing) is left out
    assert rows["cifar_dist_1"]["images_per_sec_vs_seed"] == pytest.approx(1.8)
    assert s["target_accuracy"] == 0.5 and s["seed_train_time_s"] == 40.0
    assert rows["cifar_dist_1"]["time_to_target_s"] == 20.0 and rows["cifar_dist_N"]["time_to_target_s"] == 30.0
    assert rows["fast"]["time_to_target_vs_seed_total"] == pytest.approx(5.0 / 40.0)
    t = s["targets"]
    assert t["cifar_dist_1_vs_seed_images_per_sec"]["met"] is True
    assert t["cifar_dist_N_vs_1_images_per_sec"]["value"] == pytest.approx(1700 / 900) and t["cifar_dist_N_vs_1_images_per_sec"]["met"]
    assert t["pipeline_vs_training_consumption"]["value"] == pytest.approx(20000 / 900)
    assert t["fast_time_to_seed_accuracy_vs_seed_time"]["met"] is True
    assert "| seed | 1 |" in s["markdown"]


def test_report_compares_speedrun_whole_command_with_the_seeds():
    """Issue 15's targets: speedrun_N's final test accuracy, and its whole command's wall time vs the seed's."""
    sys.path.insert(0, str(REPO / "scripts"))
    from bench_report import summarise

    def run(name, ranks, acc, wall):
        return {"variant": name, "label": name, "ranks": ranks, "ok": True, "test_accuracy": acc, "process_wall_s": wall,
                "epochs": [{"images_per_sec": 100.0, "epoch_seconds": 10.0, "val_accuracy": acc}]}

    s = summarise([run("seed", 1, 0.5, 300.0), run("speedrun_N", 2, 0.78, 120.0)], [], {
        "date": "d", "machine": {"cpu": "c", "cores": 2, "tensorflow": "t"}, "data": "sample", "seed_epochs": 1,
        "epochs": 1, "reps": 1})
    t = s["targets"]
    assert t["speedrun_N_command_wall_vs_seed_command_wall"]["value"] == pytest.approx(0.4)
    assert t["speedrun_N_command_wall_vs_seed_command_wall"]["met"] is True
    assert t["speedrun_N_test_accuracy"]["value"] == 0.78 and t["speedrun_N_test_accuracy"]["met"] is False
    assert "| 120 s |" in s["markdown"]


def test_collect_takes_whole_command_times_from_the_benchmark_log(tmp_path):
    """An interrupted benchmark's table still compares whole commands: their wall times are in bench.log."""
    sys.path.insert(0, str(REPO / "scripts"))
    from bench_training import logged_runs

    (tmp_path / "bench.log").write_text(
        "[18:43:28] pipeline: python bench_pipeline.py\n"
        "[18:45:14] seed (rep 0): python seed_reference.py --epochs 25\n"
        "    -> ok in 412 s, load 20.9 -> 21.6\n"
        "[18:52:06] speedrun_N (rep 0): python -m cifar_dist experiment=speedrun\n"
        "    -> ok in 180 s, load 14.0 -> 12.5\n"
        "[18:55:06] fast (rep 0): python -m cifar_dist experiment=fast\n")
    runs = logged_runs(tmp_path)
    assert runs["seed-rep0"]["process_wall_s"] == 412.0 and runs["speedrun_N-rep0"]["load_avg_1min"] == [14.0, 12.5]
    assert runs["speedrun_N-rep0"]["command"] == "python -m cifar_dist experiment=speedrun"
    assert "process_wall_s" not in runs["fast-rep0"]  # interrupted: no time is made up
