"""Experiment tracking with a real MLflow, offline: SQLite stores in tmp dirs, read back through MlflowClient."""

import csv
import json
import logging
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.cli import assert_ok, compose_cfg, read_metrics, run_cli, tiny_cifar

mlflow = pytest.importorskip("mlflow", reason="tracking extra not installed (pip install -e '.[tracking]')")
from mlflow.tracking import MlflowClient  # noqa: E402

from cifar_dist.all_options import register_configs  # noqa: E402
from cifar_dist.tracking.failure_guard import Guard  # noqa: E402
from cifar_dist.tracking.job_hooks import after_download, import_run_dir  # noqa: E402
from cifar_dist.tracking.run_description import (  # noqa: E402
    JobRecord,
    git_commit,
    live_tags,
    load_job,
    params,
    sweep_dir,
    tags,
)
from cifar_dist.tracking.runfile import RUN_FILE, SWEEP_FILE, read_ref  # noqa: E402
from cifar_dist.tracking.settings import apply_http_limits, redact, resolve_uri  # noqa: E402

register_configs()
QUICK = ("data=sample", "trainer.verbose=0", "trainer.tensorboard=false", "tracking=mlflow")


def steps(client, run_id, key):
    return [m.step for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def artifact_paths(client, run_id, path=None):
    out = []
    for info in client.list_artifacts(run_id, path):
        out += artifact_paths(client, run_id, info.path) if info.is_dir else [info.path]
    return out


# --- settings, params, guard: no MLflow server, no training ----------------------------------


def test_uri_resolution_and_redaction(tmp_path, monkeypatch):
    assert resolve_uri(None, {}, cwd=tmp_path) == f"sqlite:///{tmp_path}/outputs/mlflow.db"
    assert resolve_uri(None, {"MLFLOW_TRACKING_URI": "http://team:5000"}, cwd=tmp_path) == "http://team:5000"
    assert resolve_uri("http://mine:5000", {"MLFLOW_TRACKING_URI": "http://team:5000"}) == "http://mine:5000"
    assert redact("https://alice:s3cret@mlflow.example:8443/x") == "https://mlflow.example:8443/x"
    env = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "3"}
    apply_http_limits(compose_cfg("tracking=mlflow").tracking, env)
    assert env == {
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "3",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    }  # the user's own setting wins
    import mlflow.environment_variables as knobs

    for name, value in env.items():  # in the form MLflow parses
        monkeypatch.setenv(name, value)
        assert getattr(knobs, name).get() == int(value)


def test_params_are_the_flattened_config_without_secret_looking_keys():
    cfg = compose_cfg("tracking=mlflow", "optimizer.lr=0.0003")
    cfg.launcher = OmegaConf.create({"_target_": "x.Y", "storage_key": "abc", "api_token": "t", "keyring": "k"})
    p = params(cfg)
    assert p["optimizer.lr"] == "0.0003" and p["trainer.epochs"] == "100" and p["trainer.epoch_policy"] == "divide"
    assert p["tracking.backend"] == "mlflow" and p["launcher.keyring"] == "k"
    assert "launcher.storage_key" not in p and "launcher.api_token" not in p


def test_a_run_is_tagged_with_the_engine_that_trained_and_its_versions_only(tmp_path):
    """Issue 37, item 12: a JAX run was tagged ``horovod: 0.28.1`` (installed beside it) with no engine or JAX."""
    jax = {"engine": "jax", "keras": "3.8.0", "jax": "0.4.38"}
    live = live_tags("vm", 2, jax)
    assert {k: live[k] for k in jax} == jax and "horovod" not in live and live["tensorflow"]
    (tmp_path / "metrics.json").write_text(json.dumps({"run": {**jax, "tensorflow": "2.18.1"}}))
    job = JobRecord(run_dir=tmp_path, config=None, hydra=None)
    assert {k: v for k, v in tags(job).items() if k != "run_dir"} == {**jax, "tensorflow": "2.18.1"}
    assert live_tags("vm", 1, {"engine": "horovod", "horovod": "0.28.1"})["horovod"] == "0.28.1"


def test_git_commit_only_for_a_git_checkout(tmp_path):
    """None outside a git checkout; inside one, its HEAD as ``git rev-parse HEAD`` says."""
    assert git_commit(tmp_path) is None
    checkout = tmp_path / "checkout"
    git = [
        "git",
        "-C",
        str(checkout),
        "-c",
        "user.name=test",
        "-c",
        "user.email=test@example.org",
        "-c",
        "commit.gpgsign=false",
    ]
    subprocess.run(["git", "init", "-q", str(checkout)], check=True, timeout=60)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "first"], check=True, timeout=60)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True, timeout=60)
    assert git_commit(checkout) == head.stdout.strip()


def test_guard_turns_the_first_failure_into_one_warning_then_skips(caplog):
    guard = Guard("http://127.0.0.1:9", "/runs/a")
    calls = []

    def boom():
        calls.append(1)
        raise ConnectionError("refused\nsecond line")

    with caplog.at_level(logging.WARNING):
        assert guard.call("logging epoch 1", boom) is None
        assert guard.call("logging epoch 2", boom) is None
    assert calls == [1]
    lines = [r.getMessage() for r in caplog.records if r.name == "cifar_dist.tracking"]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "logging epoch 1" in lines[0] and "python -m cifar_dist.tracking import /runs/a" in lines[0]


def test_bad_remote_mode_is_a_config_error():
    from cifar_dist.config.validation import problems

    assert any("tracking.remote" in p for p in problems(compose_cfg("tracking=mlflow", "tracking.remote=both")))


def test_mpirun_ranks_get_the_tracking_uri_and_credentials_by_name_only():
    from hydra.utils import instantiate

    launcher = instantiate(compose_cfg("launcher=mpirun", "tracking=mlflow").launcher, _convert_="all")
    env = {"MLFLOW_TRACKING_URI": "http://team:5000", "MLFLOW_TRACKING_TOKEN": "s3cret"}
    names = launcher.forwarded_names(env)
    assert {"MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_TOKEN"} <= set(names)
    assert "MLFLOW_TRACKING_PASSWORD" not in names  # only what is set
    assert "s3cret" not in " ".join(names)


# --- import of a run dir (what a cluster launcher does once the outputs are downloaded) ------


def fake_run_dir(root: Path, db: Path, epochs=3, complete=True) -> Path:
    """A run dir as a Batch AI job leaves it once downloaded: .hydra/ from the launching side, rank 0's metrics.json."""
    run_dir = root / "2026-11-23" / "10-00-00"
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(
        compose_cfg("tracking=mlflow", f"tracking.uri=sqlite:///{db}", "launcher=batchai"),
        run_dir / ".hydra" / "config.yaml",
    )
    OmegaConf.save(
        OmegaConf.create({"hydra": {"mode": "RUN", "runtime": {"choices": {"launcher": "batchai"}}}}),
        run_dir / ".hydra" / "hydra.yaml",
    )
    metrics = {
        "ranks": 4,
        "complete": complete,
        "run": {"tensorflow": "2.18.1", "horovod": "0.28.1"},
        "epochs": [
            {
                "epoch": e,
                "loss": 2.0 / e,
                "accuracy": 0.1 * e,
                "val_loss": 2.1 / e,
                "val_accuracy": 0.1 * e,
                "lr": 4e-4,
                "images_per_sec": 1000.0 + e,
            }
            for e in range(1, epochs + 1)
        ],
        "test": {"loss": 1.5, "accuracy": 0.42} if complete else None,
        "images_per_sec": 1002.0,
        "wall_time_s": 60.0,
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    (run_dir / "saved_models").mkdir()
    (run_dir / "saved_models" / "keras_cifar10_trained_model.h5").write_bytes(b"model")
    return run_dir


def test_after_download_imports_the_run_dir_once(tmp_path):
    db = tmp_path / "mlflow.db"
    run_dir = fake_run_dir(tmp_path / "outputs", db)
    after_download(run_dir, succeeded=True)
    ref = read_ref(run_dir / RUN_FILE)
    client = MlflowClient(f"sqlite:///{db}")
    run = client.get_run(ref.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "2026-11-23/10-00-00"
    assert run.data.tags["launcher"] == "batchai" and run.data.tags["ranks"] == "4"
    assert run.data.tags["tensorflow"] == "2.18.1" and run.data.tags["imported"] == "true"
    assert run.data.params["launcher._target_"].endswith("BatchAILauncher")
    assert steps(client, ref.run_id, "val_accuracy") == [1, 2, 3]
    assert run.data.metrics["test_accuracy"] == pytest.approx(0.42)
    assert {"metrics.json", ".hydra/config.yaml", "saved_models/keras_cifar10_trained_model.h5"} <= set(
        artifact_paths(client, ref.run_id)
    )
    # Again (a second download, or an import by hand): the same run, no epoch twice.
    assert import_run_dir(run_dir) == ref.run_id
    assert steps(client, ref.run_id, "val_accuracy") == [1, 2, 3]


SECRET_URI = "https://alice:Pa55word-in-uri@mlflow.example:8443/x?sig=Sig-in-query"


def test_a_password_in_the_tracking_uri_reaches_no_param_tag_artifact_or_log(tmp_path, monkeypatch, caplog):
    """Secrets by value: the URI's user:password and query token, and a secret variable's value, masked everywhere;
    in a sweep's escaped overrides too."""
    from hydra._internal.grammar.utils import escape_special_characters

    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "Env-token-value")
    db = tmp_path / "mlflow.db"
    run_dir = fake_run_dir(tmp_path / "outputs", db)
    cfg = compose_cfg("tracking=mlflow", f"tracking.uri='{SECRET_URI}'", "launcher=batchai", "+notes=Env-token-value")
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
    as_a_sweep_writes_it = f"tracking.uri={escape_special_characters(SECRET_URI)}"  # issue 47: https\://alice\:...
    overrides = [f"tracking.uri={SECRET_URI}", as_a_sweep_writes_it]
    OmegaConf.save(OmegaConf.create(overrides), run_dir / ".hydra" / "overrides.yaml")
    run_id = import_run_dir(run_dir, uri=f"sqlite:///{db}")
    client = MlflowClient(f"sqlite:///{db}")
    run = client.get_run(run_id)
    assert run.data.params["tracking.uri"] == "https://mlflow.example:8443/x?sig=<redacted>"
    stored = json.dumps([run.data.params, run.data.tags])
    for path in artifact_paths(client, run_id, ".hydra"):
        stored += Path(client.download_artifacts(run_id, path, str(tmp_path / "dl"))).read_text()
    assert "mlflow.example:8443" in stored and "overrides.yaml" in " ".join(artifact_paths(client, run_id, ".hydra"))
    for secret in ("Pa55word-in-uri", "Sig-in-query", "Env-token-value"):
        assert secret not in stored, secret
    assert SECRET_URI in (run_dir / ".hydra" / "config.yaml").read_text()  # the run dir itself is left as it was

    with caplog.at_level(logging.WARNING):  # MLflow's errors name the URL: the guard's one line does not
        Guard("x", run_dir).call("opening the run", lambda: (_ for _ in ()).throw(OSError(f"GET {SECRET_URI} 500")))
    assert caplog.records and "Pa55word-in-uri" not in caplog.text and "Sig-in-query" not in caplog.text


def test_the_job_log_and_the_sweep_summary_show_no_password(tmp_path, capsys):
    from cifar_dist.common.redaction import redact_logs
    from cifar_dist.launchers.sweep_summary import summarize

    logger = logging.getLogger("test_redaction")
    handler = logging.StreamHandler()
    logger.addHandler(handler)
    try:
        redact_logs(logger)
        logger.warning("#0 : tracking.uri=%s", SECRET_URI)
    finally:
        logger.removeHandler(handler)
    point = tmp_path / "sweep" / "0"
    (point / ".hydra").mkdir(parents=True)
    OmegaConf.save(
        OmegaConf.create({"hydra": {"job": {"num": 0}, "overrides": {"task": [f"tracking.uri={SECRET_URI}"]}}}),
        point / ".hydra" / "hydra.yaml",
    )
    summarize(tmp_path / "sweep")
    shown = capsys.readouterr()
    text = shown.out + shown.err + (tmp_path / "sweep" / "sweep_summary.csv").read_text()
    assert "mlflow.example:8443" in text and "Pa55word-in-uri" not in text and "Sig-in-query" not in text


def test_ranks_get_the_tracking_uri_without_its_password_and_the_password_by_variable(tmp_path):
    from cifar_dist.launchers.base import JobSpec
    from cifar_dist.tracking.settings import export_credentials

    cfg = compose_cfg("tracking=mlflow", "tracking.uri=https://alice:Pa55word-in-uri@mlflow.example/x")
    job = JobSpec(
        cfg=cfg,
        output_dir=tmp_path,
        original_cwd=tmp_path,
        job_num=0,
        multirun=False,
        task_overrides=["tracking=mlflow", "tracking.uri=https://alice:Pa55word-in-uri@mlflow.example/x"],
        hydra_overrides=[],
        choices={},
    )
    command = " ".join(job.child_command())
    assert "tracking.uri=https://mlflow.example/x" in command and "Pa55word-in-uri" not in command
    env = {"MLFLOW_TRACKING_USERNAME": "bob"}
    export_credentials(cfg, env)
    assert (
        env["MLFLOW_TRACKING_USERNAME"] == "bob" and env["MLFLOW_TRACKING_PASSWORD"] == "Pa55word-in-uri"
    )  # user's wins


def test_each_point_of_a_sweep_sends_its_own_uris_credentials_or_none(tmp_path):
    """export_credentials in one launching process, point after point: what it exported for one point is replaced
    by the next's, or removed where the next's URI carries none (it set them with setdefault: the first point's
    password went to every later point's server, and to a server given no userinfo at all)."""
    from cifar_dist.launchers.base import JobSpec
    from cifar_dist.launchers.sweep_launcher import one_set_of_credentials
    from cifar_dist.tracking.settings import export_credentials

    env = {"MLFLOW_TRACKING_TOKEN": "users-own"}
    first = compose_cfg("tracking=mlflow", "tracking.uri=https://alice:Pw-one@one.example/x")
    second = compose_cfg("tracking=mlflow", "tracking.uri=https://carol:Pw-two@two.example/x")
    plain = compose_cfg("tracking=mlflow", "tracking.uri=https://three.example/x")
    export_credentials(first, env)
    assert (env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"]) == ("alice", "Pw-one")
    export_credentials(second, env)
    assert (env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"]) == ("carol", "Pw-two")
    export_credentials(plain, env)
    assert env == {"MLFLOW_TRACKING_TOKEN": "users-own"}  # none of the points' left; the user's own kept

    def job(cfg, num):
        return JobSpec(cfg=cfg, output_dir=tmp_path / str(num), original_cwd=tmp_path, job_num=num, multirun=True)

    one_set_of_credentials([job(first, 0), job(first, 1)])
    with pytest.raises(Exception, match=r"points #0, #1 run in one launch.*different credentials"):
        one_set_of_credentials([job(first, 0), job(second, 1)])


def test_a_sqlite_store_that_cannot_be_opened_costs_seconds_and_one_warning(tmp_path, caplog):
    """Bounded like a server: not MLflow's ten engine retries with backoff (~100 s, three lines each)."""
    import time

    db = tmp_path / "not-a-file.db"
    db.mkdir()  # a directory where the database file should be: SQLite cannot open it
    run_dir = fake_run_dir(tmp_path / "outputs", db)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        after_download(run_dir, succeeded=True)
    assert time.monotonic() - started < 15
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].name == "cifar_dist.tracking", [r.getMessage() for r in warnings]
    assert str(db) in warnings[0].getMessage() and "\n" not in warnings[0].getMessage()
    assert not (run_dir / RUN_FILE).exists()


FIRST_OPEN = """
import os, sys, time
from cifar_dist.tracking.client import client_for
from cifar_dist.tracking.store import ensure_experiment
uri, barrier = sys.argv[1], sys.argv[2]
open(os.path.join(barrier, "ready-%d" % os.getpid()), "w").close()  # MLflow imported
while not os.path.exists(os.path.join(barrier, "go")):
    time.sleep(0.005)
client = client_for(uri)
print(ensure_experiment(client, "cifar_dist", uri))
"""


def test_first_runs_into_a_new_sqlite_file_create_its_tables_once(tmp_path):
    """Four processes open a new SQLite store at the same instant: every one gets the store, none a schema error."""
    import subprocess
    import sys
    import time

    from helpers.cli import cli_env
    from helpers.paths import REPO

    uri = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
    barrier = tmp_path / "barrier"  # each process waits there, MLflow imported, for the one "go"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FIRST_OPEN, uri, str(barrier)],
            cwd=REPO,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    deadline = time.time() + 240
    while len(list(barrier.glob("ready-*"))) < 4 and time.time() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.05)
    (barrier / "go").touch()  # all four at the same instant, as soon as the last has imported MLflow
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outputs]
    assert len({out.strip() for out, _ in outputs}) == 1  # one experiment


def test_failed_cluster_job_is_marked_failed(tmp_path):
    db = tmp_path / "mlflow.db"
    run_dir = fake_run_dir(tmp_path / "outputs", db, epochs=1, complete=False)
    after_download(run_dir, succeeded=False)
    run = MlflowClient(f"sqlite:///{db}").get_run(read_ref(run_dir / RUN_FILE).run_id)
    assert run.info.status == "FAILED"


def test_an_evaluate_job_is_recorded_by_the_launching_process(tmp_path):
    from cifar_dist.tracking.job_hooks import after_job

    db = tmp_path / "mlflow.db"
    run_dir = tmp_path / "eval"
    (run_dir / ".hydra").mkdir(parents=True)
    cfg = compose_cfg("tracking=mlflow", f"tracking.uri=sqlite:///{db}", "task=evaluate", "evaluate.model=m.h5")
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
    after_job(cfg, run_dir, ok=True)
    assert not (run_dir / RUN_FILE).exists()  # no results yet (e.g. submitted to a cluster): nothing recorded
    (run_dir / "evaluation.json").write_text(json.dumps({"loss": 1.2, "accuracy": 0.5, "ranks": 2}))
    (run_dir / "predictions.csv").write_text("index,label\n")
    after_job(cfg, run_dir, ok=True)
    client = MlflowClient(f"sqlite:///{db}")
    run = client.get_run(read_ref(run_dir / RUN_FILE).run_id)
    assert run.info.status == "FINISHED" and run.data.tags["task"] == "evaluate" and run.data.tags["ranks"] == "2"
    assert run.data.metrics["test_accuracy"] == 0.5
    assert "predictions.csv" in artifact_paths(client, run.info.run_id)


def test_batchai_nodes_do_not_log_when_the_run_dir_is_imported():
    from cifar_dist.launchers.batchai.staging import node_job_config

    cfg = compose_cfg("tracking=mlflow", "launcher=batchai")
    node = OmegaConf.create(node_job_config(cfg, {"tracking": "mlflow", "launcher": "batchai"}))
    assert node.tracking.backend == "none"
    cfg.tracking.remote = "nodes"
    node = OmegaConf.create(node_job_config(cfg, {"tracking": "mlflow", "launcher": "batchai"}))
    assert node.tracking.backend == "mlflow"


def test_sweep_dir_is_the_run_dir_minus_the_resolved_subdir(tmp_path):
    run_dir = tmp_path / "multiruns" / "d" / "t" / "3"
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(
        OmegaConf.create(
            {
                "hydra": {
                    "mode": "MULTIRUN",
                    "job": {"num": 3},
                    "sweep": {"dir": "multiruns/${now:%H}", "subdir": "${hydra.job.num}"},
                }
            }
        ),
        run_dir / ".hydra" / "hydra.yaml",
    )
    assert sweep_dir(load_job(run_dir)) == tmp_path / "multiruns" / "d" / "t"


# --- real training runs, SQLite store ----------------------------------------------------------


@pytest.mark.slow  # 1.1 min; real MLflow runs stay in the default suite (the sweep and failure tests here)
def test_run_resume_and_artifacts_recorded_in_one_mlflow_run(tmp_path):
    db, run_dir = tmp_path / "mlflow.db", tmp_path / "run"
    common = (*QUICK, "trainer.epochs=2", f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={run_dir}")
    first = run_cli(*common, "trainer.max_epochs_per_run=1")
    assert_ok(first)
    client = MlflowClient(f"sqlite:///{db}")
    run_id = read_ref(run_dir / RUN_FILE).run_id
    assert client.get_run(run_id).info.status == "KILLED"  # stopped early on purpose: resumes into this run
    assert steps(client, run_id, "loss") == [1]

    second = run_cli(*common)
    assert_ok(second)
    assert read_ref(run_dir / RUN_FILE).run_id == run_id
    assert len(client.search_runs([client.get_experiment_by_name("cifar_dist").experiment_id])) == 1
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    m = read_metrics(run_dir)
    for key in ("loss", "accuracy", "val_loss", "val_accuracy", "lr", "images_per_sec"):
        history = sorted(client.get_metric_history(run_id, key), key=lambda x: x.step)
        assert [h.step for h in history] == [1, 2], key
        assert [h.value for h in history] == pytest.approx([e[key] for e in m["epochs"]]), key
    assert run.data.metrics["test_accuracy"] == pytest.approx(m["test"]["accuracy"])
    assert run.data.params["optimizer.lr"] == "0.0001" and run.data.params["data.name"] == "sample"
    assert run.data.params["trainer.max_epochs_per_run"] == "1"  # MLflow keeps a param's first value
    tags = run.data.tags
    assert tags["launcher"] == "local" and tags["ranks"] == "1" and tags["host"]
    assert tags["tensorflow"] == "2.18.1" and tags["horovod"] == "0.28.1" and tags["engine"] == "horovod"
    assert len(tags.get("git_commit", "x" * 40)) == 40
    assert {
        "metrics.json",
        "learning_curves.png",
        "training_log.csv",
        ".hydra/config.yaml",
        ".hydra/overrides.yaml",
        "saved_models/keras_cifar10_trained_model.h5",
    } <= set(artifact_paths(client, run_id))


def test_a_failing_job_is_marked_failed(tmp_path):
    db, run_dir = tmp_path / "mlflow.db", tmp_path / "run"
    proc = run_cli(*QUICK, "trainer.resume=true", f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2 and "trainer.resume=true" in proc.stderr
    run = MlflowClient(f"sqlite:///{db}").get_run(read_ref(run_dir / RUN_FILE).run_id)
    assert run.info.status == "FAILED" and run.data.params["trainer.resume"] in ("true", "True")


def test_sweep_points_grouped_under_one_parent_and_linked_from_the_summary(tiny_data, tmp_path):
    """Also the local multirun's own test: each point trained in its own dir, and the sweep's summary."""
    db, sweep = tmp_path / "mlflow.db", tmp_path / "sweep"
    proc = run_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4",
        *tiny_cifar(tiny_data),  # QUICK on tiny data: the grouping is asserted, not what the points learn
        *QUICK[1:],
        "trainer.epochs=1",
        "trainer.plot=false",
        f"tracking.uri=sqlite:///{db}",
        f"hydra.sweep.dir={sweep}",
    )
    assert_ok(proc)
    runs = {read_metrics(sweep / str(n))["run"]["lr_config"]: read_metrics(sweep / str(n)) for n in (0, 1)}
    assert set(runs) == {1e-4, 2e-4}
    assert all(m["complete"] and m["ranks"] == 1 for m in runs.values())
    client = MlflowClient(f"sqlite:///{db}")
    parent = read_ref(sweep / SWEEP_FILE).run_id
    rows = list(csv.DictReader(open(sweep / "sweep_summary.csv")))
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    assert [r["mlflow_run_id"] for r in rows] == [read_ref(sweep / str(n) / RUN_FILE).run_id for n in (0, 1)]
    lrs = set()
    for row in rows:
        run = client.get_run(row["mlflow_run_id"])
        assert run.data.tags["mlflow.parentRunId"] == parent and run.data.tags["sweep_dir"] == str(sweep)
        assert run.info.status == "FINISHED" and steps(client, run.info.run_id, "val_accuracy") == [1]
        lrs.add(run.data.params["optimizer.lr"])
    assert lrs == {"0.0001", "0.0002"}
    parent_run = client.get_run(parent)
    assert parent_run.info.status == "FINISHED"
    assert "sweep_summary.csv" in artifact_paths(client, parent)


# --- a real tracking server, stopped in the middle of a run ------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(db: Path, artifacts: Path, port: int):
    """``mlflow server`` on 127.0.0.1:<port>, once it answers /health."""
    import subprocess
    import sys
    import time
    import urllib.request

    log = open(db.with_suffix(f".server{time.time_ns()}.log"), "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{db}",
            "--artifacts-destination",
            str(artifacts),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        assert proc.poll() is None, Path(log.name).read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    raise AssertionError("mlflow server did not start: " + Path(log.name).read_text()[-3000:])


def stop_server(proc) -> None:
    import os
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its worker processes
        try:
            proc.wait(timeout=30)
        except Exception:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow  # two `mlflow server` starts and a 3-epoch run: ~12 min on the loaded 2-core machine
@pytest.mark.timeout(1800)
def test_server_stopped_mid_run_costs_one_warning_and_the_rest_is_imported_later(tmp_path):
    import subprocess
    import sys
    import time

    from helpers.cli import cli_env
    from helpers.paths import REPO

    db, artifacts, run_dir, port = tmp_path / "server.db", tmp_path / "artifacts", tmp_path / "run", free_port()
    uri = f"http://127.0.0.1:{port}"
    server = start_server(db, artifacts, port)
    try:
        training = subprocess.Popen(
            # A generous timeout: a loaded test machine answers the first requests slowly; a stopped
            # server refuses connections at once whatever the timeout.
            [
                sys.executable,
                "-m",
                "cifar_dist",
                *QUICK,
                "trainer.epochs=3",
                f"tracking.uri={uri}",
                "tracking.http_timeout_s=120",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=REPO,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        client = MlflowClient(uri)
        deadline = time.time() + 400
        while time.time() < deadline and training.poll() is None:
            ref = read_ref(run_dir / RUN_FILE)
            if ref is not None and client.get_metric_history(ref.run_id, "loss"):
                break  # epoch 1 reached the server
            time.sleep(0.2)
        assert training.poll() is None, (
            "training ended before the server was stopped: " + training.stdout.read()[-3000:]
        )
        logged_before_stop = steps(client, ref.run_id, "loss")
        stop_server(server)
        output, _ = training.communicate(timeout=600)
    finally:
        stop_server(server)
    assert_ok(training, output)
    assert read_metrics(run_dir)["complete"] is True
    warnings = [line for line in output.splitlines() if "tracking:" in line and "failed at" in line]
    assert len(warnings) == 1, output[-3000:]
    assert f"python -m cifar_dist.tracking import {run_dir}" in warnings[0]
    assert "Traceback" not in output and "Retrying" not in output
    assert logged_before_stop == [1]

    # Later, with the server back: what did not reach it is sent from the run dir.
    server = start_server(db, artifacts, port)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "cifar_dist.tracking", "import", str(run_dir)],
            cwd=REPO,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert_ok(proc)
        run = client.get_run(ref.run_id)
        assert run.info.status == "FINISHED"
        assert steps(client, ref.run_id, "loss") == [1, 2, 3]
        assert "saved_models/keras_cifar10_trained_model.h5" in artifact_paths(client, ref.run_id)
    finally:
        stop_server(server)


# --- Ctrl-C: one line, status 130, the MLflow runs KILLED -----------------------------------------


def interrupt_when(proc, ready, what):
    import signal

    from helpers.cli import wait_for

    wait_for(ready, 400, proc, what)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    return out


def assert_one_interrupted_line(proc, out):
    assert proc.returncode == 130, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if "interrupted" in line]
    assert lines == ["cifar_dist: interrupted; re-run the same command to resume"], out[-3000:]


@pytest.mark.timeout(900)
def test_ctrl_c_of_a_local_run_is_one_line_and_its_run_killed(tmp_path):
    from helpers.cli import start_cli

    db, run_dir = tmp_path / "mlflow.db", tmp_path / "run"
    proc = start_cli(*QUICK, "trainer.epochs=50", f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={run_dir}")
    out = interrupt_when(proc, lambda: (run_dir / RUN_FILE).exists(), "the MLflow run to open")
    assert_one_interrupted_line(proc, out)
    run = MlflowClient(f"sqlite:///{db}").get_run(read_ref(run_dir / RUN_FILE).run_id)
    assert run.info.status == "KILLED"


@pytest.mark.timeout(900)
def test_ctrl_c_of_a_sweep_is_one_line_and_ends_its_parent_run_killed(tmp_path):
    from helpers.cli import start_cli

    db, sweep = tmp_path / "mlflow.db", tmp_path / "sweep"
    proc = start_cli(
        "-m",
        "optimizer.lr=1e-4,2e-4",
        *QUICK,
        "trainer.epochs=50",
        f"tracking.uri=sqlite:///{db}",
        f"hydra.sweep.dir={sweep}",
    )
    out = interrupt_when(
        proc,
        lambda: (sweep / "0" / RUN_FILE).exists() and (sweep / SWEEP_FILE).exists(),
        "point #0's MLflow run to open",
    )
    assert_one_interrupted_line(proc, out)
    client = MlflowClient(f"sqlite:///{db}")
    assert client.get_run(read_ref(sweep / "0" / RUN_FILE).run_id).info.status == "KILLED"
    assert client.get_run(read_ref(sweep / SWEEP_FILE).run_id).info.status == "KILLED"
    assert not (sweep / "1").exists()  # the sweep ended: no later point started


def test_a_failed_sweep_points_overrides_reach_hydras_error_line_masked(capsys):
    """Hydra writes "Error executing job with overrides: [...]" for a failed point: no password in it."""
    from hydra.core.utils import JobReturn, JobStatus

    from cifar_dist.common.sweep_errors import PointFailed
    from cifar_dist.launchers.sweep_launcher import masked

    ret = JobReturn(
        overrides=[f"tracking.uri={SECRET_URI}", "optimizer.lr=0.9"],
        status=JobStatus.FAILED,
        _return_value=PointFailed("point #1 failed"),
    )
    with pytest.raises(PointFailed):
        masked(ret).return_value  # noqa: B018  (reading the property raises)
    err = capsys.readouterr().err
    assert "Error executing job with overrides" in err and "mlflow.example:8443" in err
    assert "Pa55word-in-uri" not in err and "Sig-in-query" not in err and "optimizer.lr=0.9" in err
