"""launcher.concurrent=k: k sweep points at once in one mpirun, one MPI group (and Horovod world) each.

The sweep launcher hands mpirun every point at once (launch_all); nothing
depends on a sweep-end callback: a sweep with ``hydra.callbacks`` emptied
still runs every point.

The command and the "would some rank wait forever" rule are checked without
MPI; real runs check that each group is its own Horovod world of np ranks
training its own point, that a batch with fewer points than k still runs, and
that a failing point is reported on its own while the other one completes.
"""

import csv
import json
import shlex
import shutil
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate

from cifar_dist.all_options import register_configs
from cifar_dist.launchers import concurrent_points
from cifar_dist.launchers.base import JobSpec, LaunchError
from cifar_dist.launchers.ranks import hosts as hosts_mod
from helpers.cli import assert_ok, read_metrics, run_cli

pytestmark = pytest.mark.horovod  # concurrent points are Horovod groups of one mpirun

register_configs()

QUICK = (
    "data=sample",
    "debug=fast",
    "trainer.epoch_policy=shard",
    "trainer.batch_size=128",
    "trainer.plot=false",
    "trainer.verbose=2",
    "trainer.epochs=1",
)


def compose_job(output_dir, *overrides, num=0):
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    job = JobSpec(
        cfg=cfg,
        output_dir=Path(output_dir),
        task_overrides=list(overrides),
        original_cwd=Path("/somewhere"),
        multirun=True,
        job_num=num,
    )
    return job, instantiate(cfg.launcher, _convert_="all")


def contexts(argv):
    """The MPMD programs of an mpirun command: (global options, [program argv, ...])."""
    first = argv.index("-np")
    programs, current = [], []
    for arg in argv[first:]:
        if arg == ":":
            programs.append(current)
            current = []
        else:
            current.append(arg)
    return argv[:first], programs + [current]


def child_overrides(program):
    child = program[program.index("--") + 1 :]
    assert child[1:3] == ["-m", "cifar_dist"]
    return {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(child[3:])}


def test_one_mpirun_runs_each_point_as_its_own_group(tmp_path, monkeypatch):
    monkeypatch.setattr(hosts_mod, "local_cores", lambda: 4)
    jobs = []
    for num, lr in enumerate((1e-4, 2e-4)):
        job, launcher = compose_job(
            tmp_path / str(num),
            "launcher=mpirun",
            "launcher.np=2",
            "launcher.concurrent=2",
            f"optimizer.lr={lr}",
            num=num,
        )
        jobs.append(job)
    argv = concurrent_points.Batch(launcher, jobs).command(env={})
    options, programs = contexts(argv)

    assert options[:2] == ["mpirun", "--enable-recovery"]
    assert options[options.index("--map-by") + 1] == "slot:PE=1"  # 4 cores over 2 groups x 2 ranks
    assert len(programs) == 2
    for group, (program, lr) in enumerate(zip(programs, (1e-4, 2e-4))):
        assert program[:2] == ["-np", "2"]
        assert "-x" in program and program[program.index("-x") + 1] == "TF_USE_LEGACY_KERAS"  # -x is per program
        wrapper = program[program.index("cifar_dist.launchers.ranks.rank_exec") : program.index("--")]
        assert wrapper[wrapper.index("--mpi-group") + 1] == str(group)
        assert wrapper[wrapper.index("--group-size") + 1] == "2"
        assert wrapper[wrapper.index("--log-dir") + 1] == str(tmp_path / str(group) / "logs")
        overrides = child_overrides(program)
        assert overrides["optimizer.lr"] == lr and overrides["launcher"] == "local"
        assert overrides["hydra.run.dir"] == str(tmp_path / str(group)) and overrides["hydra.output_subdir"] is None


def test_gloo_and_bad_values_are_refused_in_one_line(tmp_path):
    for overrides, message in (
        (("launcher=gloo", "launcher.concurrent=2"), r"^launcher.concurrent needs launcher=mpirun: horovodrun .*; use"),
        (("launcher=mpirun", "launcher.concurrent=0"), r"^launcher.concurrent=0 must be >= 1"),
        (("launcher=mpirun", "launcher.np=2", "launcher.concurrent=40"), r"^launcher.np=80 exceeds"),
    ):
        job, launcher = compose_job(tmp_path, *overrides)
        with pytest.raises(LaunchError, match=message) as caught:
            launcher.launch_all([job])
        assert "\n" not in str(caught.value)


def _record(log_dir: Path, rank: int, code: int, age: float, joined: bool = True, left: bool = False):
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"rank.{rank}.exit.json").write_text(
        json.dumps({"rank": rank, "exit_code": code, "time": time.time() - age})
    )
    if joined:
        (log_dir / f"rank.{rank}.joined").write_text("1")
    if left:
        (log_dir / f"rank.{rank}.left").write_text("1")


def test_ranks_that_would_wait_forever_stop_the_mpirun(tmp_path):
    job0, launcher = compose_job(
        tmp_path / "0",
        "launcher=mpirun",
        "launcher.np=2",
        "launcher.concurrent=2",
        "launcher.rank_failure_grace_s=5",
        num=0,
    )
    job1, _ = compose_job(tmp_path / "1", "launcher=mpirun", "launcher.np=2", "launcher.concurrent=2", num=1)
    batch = concurrent_points.Batch(launcher, [job0, job1])
    started = time.time() - 100
    logs0, logs1 = tmp_path / "0" / "logs", tmp_path / "1" / "logs"

    assert batch.stuck(started) == ""
    # A point failed after joining and its other rank finished cleanly: the other group carries on.
    _record(logs0, 0, 1, age=30)
    _record(logs0, 1, 0, age=30, left=True)
    assert batch.stuck(started) == ""
    # A rank failed recently: not yet (grace).
    _record(logs1, 1, 9, age=1)
    assert batch.stuck(started) == ""
    # ... and later its group mate is still running: stuck in a collective with it.
    _record(logs1, 1, 137, age=10)
    assert batch.stuck(started).startswith("rank 1 of point #1 failed 5s ago and its rank(s) [0] never finished")
    # Its mate reached the end of its process (waiting in MPI_Finalize for the others): fine again.
    (logs1 / "rank.0.left").write_text("1")
    assert batch.stuck(started) == ""
    # A rank that ended without ever joining its group: everyone else would wait in MPI_Init / the split.
    _record(logs0, 1, 0, age=30, joined=False)
    (logs0 / "rank.1.joined").unlink()
    assert batch.stuck(started).startswith("rank 1 of point #0 ended before joining its MPI group")
    # Records of an earlier launch do not count.
    assert batch.stuck(time.time()) == ""


def test_dry_run_prints_one_mpirun_per_batch_of_k_points(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4,4e-4",
        "launcher=mpirun",
        "launcher.np=1",
        "launcher.concurrent=2",
        "launcher.dry_run=true",
        "data=sample",
        f"hydra.sweep.dir={sweep}",
        timeout=180,
    )
    assert_ok(proc)
    lines = [shlex.split(line) for line in proc.stdout.splitlines() if line.startswith("mpirun ")]
    assert [len(contexts(argv)[1]) for argv in lines] == [2, 1]  # 3 points, k=2: a batch of 2, then of 1
    runs = [child_overrides(program)["hydra.run.dir"] for argv in lines for program in contexts(argv)[1]]
    assert runs == [str(sweep / n) for n in ("0", "1", "2")]
    groups = [program[program.index("--mpi-group") + 1] for argv in lines for program in contexts(argv)[1]]
    assert groups == ["0", "1", "0"]
    assert not (sweep / "0" / "logs").exists()


def _summary(sweep: Path):
    return [(r["varied"], r["status"], r["ranks"]) for r in csv.DictReader(open(sweep / "sweep_summary.csv"))]


# 1.7 min; the concurrent scheduler's other tests here and test_launcher_mpirun's sweep stay in the default suite
@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.horovod
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_two_points_train_at_once_each_in_its_own_horovod_world(tmp_path):
    sweep = tmp_path / "sweep"
    # No Hydra callback at all: nothing depends on one to run the points or write the summary.
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4",
        "launcher=mpirun",
        "launcher.np=1",
        "launcher.concurrent=2",
        *QUICK,
        f"hydra.sweep.dir={sweep}",
        "~hydra.callbacks.run_dir_check",
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    assert "points #0, #1 in one mpirun, 2 group(s) of 1 rank(s)" in out

    for num, lr in ((0, 1e-4), (1, 2e-4)):
        run_dir = sweep / str(num)
        m = read_metrics(run_dir)
        # One rank in its Horovod world although the mpirun had two.
        assert m["complete"] and m["ranks"] == 1 and m["run"]["lr_config"] == lr
        assert "rank 0/1 (local 0/1)" in (run_dir / "logs" / "rank.0.log").read_text()
        record = json.loads((run_dir / "logs" / "rank.0.exit.json").read_text())
        assert record["exit_code"] == 0 and record["group"] == num
        assert sorted(p.name for p in (run_dir / ".hydra").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
        assert not list(run_dir.glob("*/.hydra"))
    assert _summary(sweep) == [("optimizer.lr=0.0001", "ok", "1"), ("optimizer.lr=0.0002", "ok", "1")]


@pytest.mark.slow  # ~2.5 min here: two mpiruns one after another
@pytest.mark.mpi
@pytest.mark.horovod
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_three_points_with_k2_all_complete(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4,4e-4",
        "launcher=mpirun",
        "launcher.np=1",
        "launcher.concurrent=2",
        *QUICK,
        f"hydra.sweep.dir={sweep}",
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    assert "points #2 in one mpirun, 1 group(s) of 1 rank(s)" in out  # the remainder: a smaller mpirun
    assert [s for _, s, _ in _summary(sweep)] == ["ok", "ok", "ok"]
    assert [read_metrics(sweep / n)["run"]["lr_config"] for n in "012"] == [1e-4, 2e-4, 4e-4]


@pytest.mark.slow  # ~1.5-2 min here
@pytest.mark.mpi
@pytest.mark.horovod
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_a_failing_point_is_reported_and_the_other_completes(tmp_path):
    sweep = tmp_path / "sweep"
    # trainer.resume=true without a checkpoint fails on the rank, after it joined its group.
    proc = run_cli(
        "-m",
        "trainer.resume=auto,true",
        "launcher=mpirun",
        "launcher.np=1",
        "launcher.concurrent=2",
        *QUICK,
        f"hydra.sweep.dir={sweep}",
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]  # the sweep's exit status says a point failed
    assert [(v, s) for v, s, _ in _summary(sweep)] == [
        ("trainer.resume=auto", "ok"),
        ("trainer.resume=True", "failed"),
    ]  # as Hydra normalises it
    assert "point #1 failed (exit 1): point #1: rank 0 on" in proc.stderr and "holds no checkpoint" in out
    assert json.loads((sweep / "1" / "logs" / "rank.0.exit.json").read_text())["exit_code"] != 0
