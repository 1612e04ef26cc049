"""No secret in any file a run writes or command it hands on (issue 37, items 1, 3 and 4): an override that sets a
secret-named key, Hydra's saved ``.hydra/*.yaml``, a job's description, and a tracking URI whose query credential
would reach the ranks as ``<redacted>`` (refused in one line naming MLflow's variables)."""

from __future__ import annotations

import stat
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from cifar_dist.common.redaction import MASK, is_secret_env, is_secret_key, redact_config, redact_text
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


# --- issue 47: a sweep's escaped overrides, common secret names, whole values, --cfg, hydra.job.env_set -----------

SWEPT = "optimizer.lr=1e-4,2e-4"
# Each as a user types it, with the part that must never be shown.
TYPED_SECRETS = [
    (f"tracking.uri=http://alice:{PASSWORD}@127.0.0.1:9/", PASSWORD),  # a sweep escapes it: http\://alice\:...
    ("tracking.uri='http://alice:Pa55,w x@127.0.0.1:9/'", "Pa55,w x"),  # quoted: a sweep keeps the quotes
    ('tracking.uri="http://alice:Pa55\'w@127.0.0.1:9/"', "Pa55'w"),
    ("tracking.uri=http://127.0.0.1:9/x?sig\\=S1g-value", "S1g-value"),  # Hydra's own escape, kept
    ("+launcher.env.MY_TOKEN=Tok3n\\ Value\\,xyz", "Value"),  # escaped: its space and comma are the value's
]


@pytest.mark.parametrize("typed, secret", TYPED_SECRETS, ids=["escaped", "quoted", "double-quoted", "query", "env"])
def test_every_form_hydra_writes_an_override_in_is_masked(typed, secret, tmp_path):
    """Issue 47, item 1: in a sweep Hydra writes each override anew (``BasicSweeper.split_arguments``, escaped
    with ``escape_special_characters`` or quoted), and the URI rule needed a literal ``://``."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([typed, SWEPT])
    points = BasicSweeper.split_arguments(parsed, None)[0]
    written = {o for point in points for o in point if not o.startswith("optimizer.")}
    assert len(points) == 2 and len(written) == 1, points
    for form in [typed, *written]:
        assert secret in form, form  # else the test would prove nothing
        console = f"[HYDRA] \t#0 : {form} launcher=mpirun"  # Hydra's launch line
        for masked in (redact_text(form), redact_text(console)):
            assert secret not in masked and ("127.0.0.1" in masked or "tracking" not in form), masked
        path = tmp_path / "overrides.yaml"
        OmegaConf.save(OmegaConf.create([form, "optimizer.lr=0.0001"]), path)
        redact_yaml_file(path)
        assert secret not in path.read_text() and "optimizer.lr=0.0001" in path.read_text()


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_a_sweep_hands_a_tracking_password_to_the_ranks_environment_only(tmp_path):
    """Issue 47, item 1, as the user ran it: ``-m`` with ``tracking.uri=http://alice:PW@host/`` on mpirun; the
    password typed with a raw ``/`` (issue 57, item 1). The ranks' interpreter is a stand-in that records its
    command line (what ``ps`` shows) and environment."""
    typed = f"{PASSWORD}/w9"
    records = tmp_path / "ranks"
    python = tmp_path / "python"
    python.write_text(RECORDING_PYTHON.format(records=records, python=sys.executable))
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    sweep_dir = tmp_path / "sweep"
    proc = run_cli(
        "-m",
        SWEPT,
        "tracking=mlflow",
        f"tracking.uri=http://alice:{typed}@127.0.0.1:9/",
        "launcher=mpirun",
        "launcher.np=1",
        f"launcher.python={python}",
        "data=sample",
        f"hydra.sweep.dir={sweep_dir}",
        timeout=240,
    )
    ranks = sorted(records.iterdir()) if records.is_dir() else []
    assert len(ranks) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert PASSWORD not in proc.stdout + proc.stderr and "#1 : optimizer.lr=0.0002" in proc.stdout + proc.stderr
    written = [p for p in sweep_dir.rglob("*") if p.is_file()]
    assert {"overrides.yaml", "hydra.yaml", "multirun.yaml", "sweep_summary.csv"} <= {p.name for p in written}
    for path in written:
        assert PASSWORD not in path.read_text(errors="replace"), path
    for rank in ranks:
        argv, env = (rank / "argv").read_text(), (rank / "env").read_text().splitlines()
        assert PASSWORD not in argv and "tracking.uri=http\\://127.0.0.1\\:9/" in argv, argv
        assert f"MLFLOW_TRACKING_PASSWORD={typed}" in env and "MLFLOW_TRACKING_USERNAME=alice" in env


# The ranks' interpreter for the test above: a rank's start records its argv and environment, anything else is real.
RECORDING_PYTHON = """#!/bin/sh
if [ "$2" = cifar_dist.launchers.ranks.rank_exec ]; then
    mkdir -p {records}/$$ && printf '%s\\n' "$@" > {records}/$$/argv && env > {records}/$$/env
    exit 0
fi
exec {python} "$@"
"""

COMMON_SECRET_NAMES = [
    "DB_PASS",
    "DB_PWD",
    "GITHUB_PAT",
    "sas",
    "AZURE_SAS",
    "APIKEY",
    "openai_apikey",
    "AZURE_STORAGE_CONNECTION_STRING",
    "db_connectionstring",
    "ssh_passphrase",
    "gcp_credentials",
    "DB_PASSWORD",
    "api_key",
    # issue 57, item 12: a secret word anywhere in the name (``key`` as a word)
    "SECRET_KEY_BASE",
    "AWS_ACCESS_KEY_ID",
    "MY_TOKEN_FILE",
    "DB_PASSWORD_2",
    "PASSWD_FILE",
    "api_key_v2",
    "credentials_json",
    "accessToken",
]
LOOK_ALIKES = ["path", "compass", "bypass", "patience", "sass", "keyring", "monkey", "passes", "pwd_dir", "tokens_seen"]
LOOK_ALIKES += ["TOKENIZERS_PARALLELISM", "secretary", "pass_through", "hotkeys", "exclude_keys", "KEYRING_BACKEND"]


def test_the_common_secret_names_are_secret_and_their_look_alikes_are_not(tmp_path):
    """Issue 47, item 5: ``sas``, ``DB_PASS``, ``APIKEY``, ``*_PAT``, ``*_PWD``, ``*_CONNECTION_STRING`` stayed in
    ``.hydra/``; the shell's ``PWD`` (the working directory) is no secret. Issue 57, item 12: ``SECRET_KEY_BASE``
    (a secret word not at the end) stayed in ``.hydra/`` and on the console; Batch AI's ``key_vault_*`` settings
    (where the key is, not the key) stay, so that a saved config re-runs."""
    assert [n for n in COMMON_SECRET_NAMES if not is_secret_key(f"launcher.env.{n}")] == []
    assert [n for n in LOOK_ALIKES if is_secret_key(f"data.{n}")] == []
    assert all(is_secret_env(n) for n in COMMON_SECRET_NAMES) and not is_secret_env("PWD")
    path = tmp_path / "config.yaml"
    env = {name: f"{TOKEN}-{i}" for i, name in enumerate(COMMON_SECRET_NAMES)}
    overrides = [f"+launcher.env.{name}={value}" for name, value in env.items()]
    OmegaConf.save(OmegaConf.create({"launcher": {"env": env}, "overrides": overrides}), path)
    redact_yaml_file(path)
    assert TOKEN not in path.read_text(), path.read_text()
    assert redact_text(f"[HYDRA] #0 : +launcher.env.SECRET_KEY_BASE={TOKEN}") == (
        f"[HYDRA] #0 : +launcher.env.SECRET_KEY_BASE={MASK}"
    )
    vault = {"key_vault_id": "/subscriptions/s/vaults/v", "key_vault_secret_url": "https://v.vault.azure.net/secrets/k"}
    assert redact_config({"launcher": vault}) == {"launcher": vault}


def test_a_secret_variables_value_is_masked_as_a_whole_value_never_inside_another(monkeypatch, tmp_path):
    """Issue 47, item 5: with ``GIT_TOKEN=imgs_tok`` in the environment, the saved ``data.path`` lost its folder
    name and a later evaluate failed."""
    monkeypatch.setenv("GIT_TOKEN", "imgs_tok")
    monkeypatch.setenv("PWD", str(tmp_path))  # the working directory, named like a secret: never masked
    paths = {"path": "/data/imgs_tok/train", "archive": "imgs_tok.tar.gz", "cache_dir": f"{tmp_path}/cache"}
    path = tmp_path / "config.yaml"
    OmegaConf.save(OmegaConf.create({"data": paths, "notes": "imgs_tok"}), path)
    redact_yaml_file(path)
    saved = yaml.safe_load(path.read_text())
    assert saved == {"data": paths, "notes": MASK}  # a setting that is the secret, whole, is masked
    assert redact_text("pushed with imgs_tok. see /data/imgs_tok/x, GIT='imgs_tok'") == (
        f"pushed with {MASK}. see /data/imgs_tok/x, GIT='{MASK}'"
    )


def test_cfg_job_masks_as_the_saved_config_does():
    """Issue 47, item 5: ``--cfg job`` printed a secret-named key's value; ``--package`` prints a node alone."""
    token = ("+launcher.env.MY_TOKEN=" + TOKEN, "launcher=mpirun")
    whole = run_cli("--cfg", "job", *token, "tracking=mlflow", f"tracking.uri=http://alice:{PASSWORD}@h:5000/")
    assert_ok(whole)
    assert TOKEN not in whole.stdout and PASSWORD not in whole.stdout
    assert f"    MY_TOKEN: {MASK}" in whole.stdout.splitlines() and "  uri: http://h:5000/" in whole.stdout
    assert yaml.safe_load(whole.stdout)["launcher"]["np"] == 2  # the rest as Hydra prints it
    node = run_cli("--cfg", "job", "--package", "launcher.env.MY_TOKEN", *token)
    assert_ok(node)
    assert node.stdout.strip() == MASK


def test_a_secret_in_hydra_job_env_set_is_refused_for_the_ranks_not_handed_on_masked(tmp_path):
    """Issue 47, item 5: ``+hydra.job.env_set.MY_TOKEN=...`` reached the ranks as ``<redacted>``, which Hydra's
    parser refused there (the job died)."""
    from cifar_dist.launchers.base import JobSpec, LaunchError

    hydra = [f"+hydra.job.env_set.MY_TOKEN={TOKEN}", "+hydra.job.env_set.MODE=fast"]
    job = JobSpec(cfg=compose_cfg("launcher=mpirun"), output_dir=tmp_path, hydra_overrides=hydra)
    with pytest.raises(LaunchError, match=r"^hydra.job.env_set.MY_TOKEN: a value named as a secret .*\(launcher\.env"):
        job.child_overrides()
    job.hydra_overrides = hydra[1:]
    assert "+hydra.job.env_set.MODE=fast" in job.child_overrides()


def test_a_secret_in_hydra_job_env_set_in_dict_form_is_refused_as_the_dotted_form_is(tmp_path):
    """Issue 57, item 11: ``+hydra.job.env_set={MY_TOKEN: ...}`` got past the refusal, reached the ranks as
    ``{MY_TOKEN: <redacted>}`` and Hydra's parser refused it there; its value was in clear in ``overrides.yaml``."""
    from cifar_dist.launchers.base import JobSpec, LaunchError

    dict_form = f"+hydra.job.env_set={{MY_TOKEN: {TOKEN}, MODE: fast}}"
    job = JobSpec(cfg=compose_cfg("launcher=mpirun"), output_dir=tmp_path, hydra_overrides=[dict_form])
    with pytest.raises(LaunchError, match=r"^hydra.job.env_set.MY_TOKEN: a value named as a secret .*\(launcher\.env"):
        job.child_overrides()
    job.hydra_overrides = ["+hydra.job.env_set={MODE: fast, MONKEY: x}"]
    assert "+hydra.job.env_set={MODE: fast, MONKEY: x}" in job.child_overrides()
    assert redact_text(dict_form) == f"+hydra.job.env_set={{MY_TOKEN: {MASK}, MODE: fast}}"
    run_dir = tmp_path / "run"
    line = one_error_line(run_cli("launcher=mpirun", dict_form, "data=sample", f"hydra.run.dir={run_dir}"))
    assert line.startswith("cifar_dist: error: hydra.job.env_set.MY_TOKEN: a value named as a secret"), line
    assert TOKEN not in line and not run_dir.exists()


def test_hydras_own_error_does_not_echo_a_secret():
    """Issue 47, item 5: without ``+``, Hydra's error ("To append to your config use +hydra.job.env_set...")
    quoted the value."""
    proc = run_cli(f"hydra.job.env_set.MY_TOKEN={TOKEN}", "data=sample")
    assert proc.returncode != 0 and "+hydra.job.env_set.MY_TOKEN=" in proc.stderr, proc.stderr
    assert TOKEN not in proc.stdout + proc.stderr
