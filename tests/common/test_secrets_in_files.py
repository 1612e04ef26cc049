"""No secret in any file a run writes or command it hands on (issue 37, items 1, 3 and 4): an override that sets a
secret-named key, Hydra's saved ``.hydra/*.yaml``, a job's description, and a tracking URI whose query credential
would reach the ranks as ``<redacted>`` (refused in one line naming MLflow's variables)."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from cifar_dist.common.redaction import MASK, redact_config, redact_text
from cifar_dist.config.validation import launcher_problems
from cifar_dist.rundir.resume_policy import differences
from cifar_dist.rundir.saved_config import redact_yaml_file
from helpers.cli import assert_ok, compose_cfg, one_error_line, run_cli
from helpers.fake_azureml.fixtures import aml_env, aml_overrides

TOKEN = "Tok3n-Value-xyz"
PASSWORD = "Pa55-in-uri"


def test_an_override_setting_a_secret_named_key_is_masked_and_others_are_not():
    assert redact_text(f"+launcher.env.MY_TOKEN={TOKEN}") == f"+launcher.env.MY_TOKEN={MASK}"
    assert redact_text(f"run x: optimizer.lr=0.002 launcher.env.DB_PASSWORD='{TOKEN} b'") == (
        f"run x: optimizer.lr=0.002 launcher.env.DB_PASSWORD={MASK}"
    )
    assert redact_text("model.width=32 launcher.env.FOO=bar") == "model.width=32 launcher.env.FOO=bar"


def test_saved_yaml_loses_secret_keys_uri_passwords_and_secret_overrides(tmp_path):
    path = tmp_path / "config.yaml"
    uri = f"http://alice:{PASSWORD}@host:5000/"
    OmegaConf.save(
        OmegaConf.create(
            {
                "tracking": {"uri": uri},
                "launcher": {"env": {"MY_TOKEN": TOKEN, "FOO": "bar"}},
                "overrides": [f"+launcher.env.MY_TOKEN={TOKEN}", f"tracking.uri={uri}"],
                "lr": "${optimizer.lr}",
            }
        ),
        path,
    )
    redact_yaml_file(path)
    text = path.read_text()
    assert TOKEN not in text and PASSWORD not in text, text
    saved = yaml.safe_load(text)
    assert saved["tracking"]["uri"] == "http://host:5000/" and saved["launcher"]["env"]["FOO"] == "bar"
    assert saved["lr"] == "${optimizer.lr}"  # interpolations stay as written


def test_keys_that_only_look_secret_stay_so_that_a_saved_config_re_runs():
    saved = redact_config({"launcher": {"credential": "cli", "ssh_public_key": "~/.ssh/id_rsa.pub"}})
    assert saved == {"launcher": {"credential": "cli", "ssh_public_key": "~/.ssh/id_rsa.pub"}}
    assert redact_text("launcher.credential=cli") == "launcher.credential=cli"


def test_a_secret_named_override_is_refused_rather_than_handed_to_the_ranks_masked(tmp_path):
    """Masked on a rank's command line, a secret-named override would arrive as ``<redacted>``: refused, saying how."""
    from cifar_dist.launchers.base import JobSpec, LaunchError

    overrides = ["launcher=mpirun", f"+launcher.env.MY_TOKEN={TOKEN}", "optimizer.lr=0.01"]
    job = JobSpec(cfg=compose_cfg(*overrides), output_dir=tmp_path, task_overrides=overrides)
    command = " ".join(job.child_overrides())  # the launcher group's env stays with the launcher: not handed on
    assert "optimizer.lr=0.01" in command and TOKEN not in command and "MY_TOKEN" not in command
    overrides.append(f"+data.kwargs.api_key={TOKEN}")
    job = JobSpec(cfg=compose_cfg(*overrides), output_dir=tmp_path, task_overrides=overrides)
    with pytest.raises(LaunchError, match=r"^data.kwargs.api_key: a value named as a secret would reach the ranks"):
        job.child_overrides()


def test_a_resume_compares_masked_settings_with_the_masked_saved_config():
    cfg = compose_cfg(f"+launcher.env.MY_TOKEN={TOKEN}", "launcher=mpirun")
    saved = OmegaConf.create(redact_config(OmegaConf.to_container(cfg, resolve=False)))
    assert differences(saved, cfg) == []


def test_a_query_credential_in_the_tracking_uri_is_refused_for_a_launcher_that_hands_the_job_on():
    uri = "'http://127.0.0.1:9/x?sig=SIGsecret&sv=2022-11-02'"
    found = launcher_problems(compose_cfg("tracking=mlflow", f"tracking.uri={uri}", "launcher=mpirun"))
    assert len(found) == 1 and "MLFLOW_TRACKING_TOKEN" in found[0] and "sig, sv" in found[0], found
    assert "SIGsecret" not in found[0]
    assert launcher_problems(compose_cfg("tracking=mlflow", f"tracking.uri={uri}")) == []  # local: in this process
    password_only = f"tracking.uri='http://alice:{PASSWORD}@127.0.0.1:9/'"  # reaches ranks as MLflow's variables
    assert launcher_problems(compose_cfg("tracking=mlflow", password_only, "launcher=mpirun")) == []


def test_the_refusal_is_one_line_before_the_run_dir_is_made(tmp_path):
    run_dir = tmp_path / "run"
    line = one_error_line(
        run_cli(
            "tracking=mlflow",
            "tracking.uri='http://127.0.0.1:9/x?token=TOKsecret'",
            "launcher=mpirun",
            f"hydra.run.dir={run_dir}",
        )
    )
    assert "MLFLOW_TRACKING_TOKEN" in line and "TOKsecret" not in line and not run_dir.exists(), line


def test_an_azureml_dry_run_writes_the_token_only_where_the_user_asked(fake_aml, snapshot_cache, tmp_path):
    run_dir = tmp_path / "run"
    extra = {"launcher.dry_run": "true", "+launcher.env.MY_TOKEN": TOKEN, "tracking": "mlflow"}
    extra["tracking.uri"] = f"'http://alice:{PASSWORD}@127.0.0.1:9/'"
    proc = run_cli(
        *aml_overrides(fake_aml, run_dir, snapshot_cache, **extra), env=aml_env(fake_aml), cwd=tmp_path, timeout=60
    )
    assert_ok(proc)
    job_file = run_dir / "azureml" / "job.yml"
    doc = yaml.safe_load(job_file.read_text())
    assert doc["environment_variables"]["MY_TOKEN"] == TOKEN  # the one place the user asked for
    del doc["environment_variables"]["MY_TOKEN"]
    assert TOKEN not in yaml.safe_dump(doc) and "MY_TOKEN" in doc["description"], doc["description"]
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and path != job_file and path.suffix in (".yaml", ".yml", ".sh", ".log", ".json", ".txt"):
            text = path.read_text(errors="replace")
            assert TOKEN not in text and PASSWORD not in text, path
    assert PASSWORD not in proc.stdout + proc.stderr
