"""benchmarks/bench_training.py in its quickest mode produces its table, JSON and plots."""

import json
import os
import subprocess
import sys

import pytest

from helpers.cli import assert_ok, cli_env
from helpers.paths import REPO


@pytest.mark.slow
def test_smoke_benchmark_writes_table_json_and_plots(tmp_path):
    # Only this test runs the seed reference, whose ImageDataGenerator needs scipy; the others run anywhere.
    pytest.importorskip("scipy", reason="the seed reference's ImageDataGenerator needs scipy (pip install -e .[bench])")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "training",
            "--smoke",
            "--out",
            str(tmp_path),
            "--work",
            str(tmp_path / "runs"),
        ],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert_ok(proc)
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
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_training import command, variant_table, work_dir

    monkeypatch.chdir(tmp_path)
    work = work_dir("outputs/bench/x")
    assert work == tmp_path / "outputs" / "bench" / "x"
    for name in ("seed", "bare", "cifar_dist_1"):
        cmd = command(variant_table(2)[name], "sample", 1, work / f"{name}-rep0")
        paths = [arg.split("=", 1)[-1] for arg in cmd if str(work) in arg]
        assert paths and all(p.startswith("/") for p in paths), cmd


def test_report_reads_steady_rates_time_to_accuracy_and_targets():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_report import summarise

    def run(name, ranks, rates, accs, seconds=10.0):
        return {
            "variant": name,
            "label": name,
            "ranks": ranks,
            "ok": True,
            "test_accuracy": accs[-1],
            "peak_rss_mb_per_rank": [500.0] * ranks,
            "epochs": [{"images_per_sec": r, "epoch_seconds": seconds, "val_accuracy": a} for r, a in zip(rates, accs)],
        }

    results = [
        run("seed", 1, [100, 400, 500, 600], [0.2, 0.3, 0.4, 0.5]),
        run("cifar_dist_1", 1, [50, 800, 900, 1000], [0.3, 0.5, 0.6, 0.6]),
        run("cifar_dist_N", 2, [50, 1700, 1700, 1700], [0.3, 0.4, 0.5, 0.6]),
        run("fast", 2, [50, 2000], [0.55, 0.7], seconds=5.0),
    ]
    s = summarise(
        results,
        [{"ok": True, "images_per_sec": {"seed_flow": 2000.0, "cifar_dist": 20000.0}}],
        {
            "date": "d",
            "machine": {"cpu": "c", "cores": 2, "tensorflow": "t"},
            "data": "sample",
            "seed_epochs": 4,
            "epochs": 4,
            "reps": 1,
        },
    )
    rows = {r["variant"]: r for r in s["rows"]}
    assert rows["seed"]["images_per_sec"] == 500  # the first epoch (tracing) is left out
    assert rows["cifar_dist_1"]["images_per_sec_vs_seed"] == pytest.approx(1.8)
    assert s["target_accuracy"] == 0.5 and s["seed_train_time_s"] == 40.0
    assert rows["cifar_dist_1"]["time_to_target_s"] == 20.0 and rows["cifar_dist_N"]["time_to_target_s"] == 30.0
    assert rows["fast"]["time_to_target_vs_seed_total"] == pytest.approx(5.0 / 40.0)
    t = s["targets"]
    assert t["cifar_dist_1_vs_seed_images_per_sec"]["met"] is True
    assert (
        t["cifar_dist_N_vs_1_images_per_sec"]["value"] == pytest.approx(1700 / 900)
        and t["cifar_dist_N_vs_1_images_per_sec"]["met"]
    )
    assert t["pipeline_vs_training_consumption"]["value"] == pytest.approx(20000 / 900)
    assert t["fast_time_to_seed_accuracy_vs_seed_time"]["met"] is True
    assert "| seed | 1 |" in s["markdown"]


def test_report_compares_speedrun_whole_command_with_the_seeds():
    """Issue 15's targets: speedrun_N's final test accuracy, and its whole command's wall time vs the seed's."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_report import summarise

    def run(name, ranks, acc, wall):
        return {
            "variant": name,
            "label": name,
            "ranks": ranks,
            "ok": True,
            "test_accuracy": acc,
            "process_wall_s": wall,
            "epochs": [{"images_per_sec": 100.0, "epoch_seconds": 10.0, "val_accuracy": acc}],
        }

    s = summarise(
        [run("seed", 1, 0.5, 300.0), run("speedrun_N", 2, 0.78, 120.0)],
        [],
        {
            "date": "d",
            "machine": {"cpu": "c", "cores": 2, "tensorflow": "t"},
            "data": "sample",
            "seed_epochs": 1,
            "epochs": 1,
            "reps": 1,
        },
    )
    t = s["targets"]
    assert t["speedrun_N_command_wall_vs_seed_command_wall"]["value"] == pytest.approx(0.4)
    assert t["speedrun_N_command_wall_vs_seed_command_wall"]["met"] is True
    assert t["speedrun_N_test_accuracy"]["value"] == 0.78 and t["speedrun_N_test_accuracy"]["met"] is False
    assert "| 120 s |" in s["markdown"]


def test_collect_takes_whole_command_times_from_the_benchmark_log(tmp_path):
    """An interrupted benchmark's table still compares whole commands: their wall times are in bench.log."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_training import logged_runs

    (tmp_path / "bench.log").write_text(
        "[18:43:28] pipeline: python bench_pipeline.py\n"
        "[18:45:14] seed (rep 0): python seed_reference.py --epochs 25\n"
        "    -> ok in 412 s, load 20.9 -> 21.6\n"
        "[18:52:06] speedrun_N (rep 0): python -m cifar_dist experiment=speedrun\n"
        "    -> ok in 180 s, load 14.0 -> 12.5\n"
        "[18:55:06] fast (rep 0): python -m cifar_dist experiment=fast\n"
    )
    runs = logged_runs(tmp_path)
    assert runs["seed-rep0"]["process_wall_s"] == 412.0 and runs["speedrun_N-rep0"]["load_avg_1min"] == [14.0, 12.5]
    assert runs["speedrun_N-rep0"]["command"] == "python -m cifar_dist experiment=speedrun"
    assert "process_wall_s" not in runs["fast-rep0"]  # interrupted: no time is made up


def _events(pid, rank, start, marks):
    """A process's probe events: ``marks`` is [(event, seconds after start)]."""
    return [{"pid": pid, "rank": rank, "event": name, "t": start + dt} for name, dt in marks]


def _epoch(start, train, val):
    marks = [("fit.epoch_begin.first", start), ("fit.epoch_begin.last", start)]
    if val:
        marks += [("fit.test_begin.first", start + train), ("fit.test_end.last", start + train + val)]
    end = start + train + val
    return marks + [("fit.epoch_end.first", end), ("fit.epoch_end.last", end + 0.5)], end + 0.5


def test_breakdown_of_a_two_rank_run_adds_up_to_the_whole_command():
    """Issue 24's breakdown: consecutive phases from the probe's events, the first epoch's extra time as tracing,
    epochs that do not validate (trainer.validate_every) counted as training only."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_phases import breakdown

    t0, T, A = 1000.0, "cifar_dist.training.trainer.", "cifar_dist.app."
    launching = _events(
        1,
        None,
        t0,
        [
            ("process_start", 0.0),
            ("interpreter_ready", 0.1),
            (A + "main:enter", 1.0),
            (A + "select_launcher:enter", 1.5),
            ("launcher.launch:enter", 1.6),
            ("launcher.launch:exit", 40.0),
            (A + "record_end:exit", 40.5),
            (A + "main:exit", 41.0),
            ("process_exit", 41.2),
        ],
    )
    marks = [
        ("process_start", 3.0),
        ("interpreter_ready", 3.1),
        (A + "main:enter", 4.0),
        (T + "train:enter", 4.5),
        (T + "start_engine:enter", 4.6),
        (T + "start_engine:exit", 8.6),
        (T + "start_run:exit", 8.7),
        (T + "load_data:exit", 9.0),
        (T + "build_model:exit", 10.0),
        (T + "restore_or_start:exit", 10.2),
        (T + "make_streams:exit", 11.0),
        (T + "open_tracker:exit", 11.0),
        ("fit.train_begin.last", 11.2),
    ]
    t = 11.2
    for train, val in ((8.0, 0.0), (3.0, 0.0), (3.0, 1.0)):  # validation at the end only; the first epoch traces
        epoch, t = _epoch(t, train, val)
        marks += epoch
    marks += [
        ("fit.train_end.first", t + 0.2),
        ("fit.train_end.last", t + 0.2),
        (T + "finish:enter", t + 1.0),
        ("cifar_dist.training.recipe.hooks.final_test:enter", t + 1.2),
        ("cifar_dist.training.exact_test.evaluate_exact:exit", t + 2.2),
        ("cifar_dist.training.recipe.hooks.final_test:exit", t + 4.2),
        ("cifar_dist.training.run_records.write_record:exit", t + 4.5),
        (T + "finish:exit", t + 4.6),
        (T + "train:exit", t + 4.7),
        ("process_exit", t + 5.0),
    ]
    wrapper = _events(4, 0, t0, [("process_start", 2.5), ("process_exit", 39.0)])  # the launcher's rank_exec
    rank0 = wrapper + _events(2, 0, t0, marks) + _events(3, 1, t0, [("process_start", 3.0)])
    result = breakdown(launching + rank0, t0 - 0.05, t0 + 42.0)

    phases = {p["phase"]: p["seconds"] for p in result["phases"]}
    assert sum(phases.values()) == pytest.approx(42.05)
    assert phases["mpirun start to rank processes"] == pytest.approx(0.9)
    assert phases["rank wrapper (rank_exec) to the rank's python"] == pytest.approx(0.5)
    assert phases["engine start (its framework's imports)"] == pytest.approx(4.0)
    assert phases["tracing + first steps beyond a steady epoch (training)"] == pytest.approx(5.0)
    assert phases["training steps (steady)"] == pytest.approx(9.0)
    assert phases["validation, BatchNorm sync before it (1 of 3 epochs)"] == pytest.approx(1.0)
    assert phases["final test, plain and TTA"] == pytest.approx(1.0) and phases[
        "final test's records"
    ] == pytest.approx(2.0)
    # no model was saved (no atomic_save_model event): its time is merged into the next phase, not lost
    assert phases["model save + learning-curve plot + metrics.json"] == pytest.approx(0.3)
    assert phases["rank's end of job + atexit handlers (Horovod shutdown)"] == pytest.approx(0.3)
    assert phases["atexit handlers"] == pytest.approx(0.2) and phases["interpreter teardown"] == pytest.approx(0.8)
    assert result["fit_return_wait_s"] == pytest.approx(0.8)  # Keras' on_train_end to the trainer's finish
    cats = result["categories"]
    assert cats["launcher start to ranks up (Horovod init)"] == pytest.approx(0.9 + 0.5 + 0.1 + 0.9 + 0.5 + 4.0 + 0.1)
    assert cats["checkpoints and logs"] == pytest.approx(1.5 + 0.3)


def test_fixed_cost_from_two_whole_commands():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_breakdown import fixed_cost

    f = fixed_cost(31.0, 50.0, 5)
    assert f["fixed_s"] == pytest.approx(12.0) and f["epoch_cost_s"] == pytest.approx(3.8)
    assert f["whole_vs_epochs_cost"] == pytest.approx(31.0 / 19.0)  # issue 24: 1.63x
    assert fixed_cost(31.0, 30.0, 5) is None and fixed_cost(None, 50.0, 5) is None  # no cost from noise or a failed run


def test_phase_probe_times_the_app_only_when_asked(tmp_path):
    """benchmarks/phase_probe: with CIFAR_DIST_PHASE_LOG set, the app's functions are wrapped, the start logged."""
    log = tmp_path / "events.jsonl"
    code = "import cifar_dist.app as a; print(hasattr(a.end_of_job, '__wrapped__'))"
    env = cli_env(PYTHONPATH=os.pathsep.join([str(REPO / "benchmarks" / "phase_probe"), str(REPO)]))
    for on in (True, False):
        run_env = (
            dict(env, CIFAR_DIST_PHASE_LOG=str(log))
            if on
            else {k: v for k, v in env.items() if k != "CIFAR_DIST_PHASE_LOG"}
        )
        proc = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True, timeout=120)
        assert_ok(proc)
        assert proc.stdout.strip() == str(on)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["process_start", "interpreter_ready", "process_exit"]
    assert events[0]["t"] <= events[1]["t"] <= events[2]["t"] and events[0]["rank"] is None


@pytest.mark.slow
def test_breakdown_smoke_writes_tables_and_fixed_cost(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_breakdown.py"),
            "--smoke",
            "--out",
            str(tmp_path / "bd"),
            "--work",
            str(tmp_path / "runs"),
        ],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert_ok(proc)
    result = json.loads((tmp_path / "bd.json").read_text())
    runs = {r["variant"]: r for r in result["runs"]}
    assert set(runs) == {"seed_1_1ep", "seed_1_2ep"} and all(r["ok"] for r in runs.values())
    b = runs["seed_1_1ep"]["breakdown"]
    assert sum(p["seconds"] for p in b["phases"]) == pytest.approx(runs["seed_1_1ep"]["process_wall_s"], abs=0.05)
    assert b["categories"]["training steps"] > 0 and b["categories"]["launcher start to ranks up (Horovod init)"] > 0
    fixed = result["ratios"]["seed_1_fixed"]  # None where a wait as fit returned made T(2N) <= T(N)
    assert len(fixed["fit_return_wait_s"]) == 2 and all(
        f is None or f["epochs"] == 1 for f in (fixed["measured"], fixed["without_fit_return_wait"])
    )
    table = (tmp_path / "bd.md").read_text()
    assert "| training steps |" in table and "whole / N epochs' cost" in table and str(REPO) not in table


def test_breakdown_plan_pairs_n_with_2n_and_adds_the_recipe_as_configured(monkeypatch):
    """The speedrun's fixed cost compares N with 2N epochs; when N is not the recipe's own epochs (to compare
    with an earlier sitting), the recipe as configured runs too: issue 15's budget is about that command."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_breakdown

    monkeypatch.setattr(bench_breakdown, "speedrun_epochs", lambda: 30)
    plan = bench_breakdown.plan(bench_breakdown.parse_args(["--out", "x", "--speedrun-epochs", "12"]))
    assert ("speedrun_2", 12, True) in plan and ("speedrun_2", 24, True) in plan and ("seed_1", 10, True) in plan
    assert plan[-1] == ("speedrun_2", 30, False)
    plan = bench_breakdown.plan(bench_breakdown.parse_args(["--out", "x"]))
    assert ("speedrun_2", 30, False) in plan and ("speedrun_2", 60, True) in plan and len(plan) == 6
