"""A URI's password as a user types it, percent-encoded or not (issue 57, item 1): ``http://alice:SECRq/w9@host/``
was in clear in ``.hydra/*.yaml``, the job log, the console's tracking warning, the ranks' command line and
``--cfg job``; in a sweep, ``SECR@T,pw9 x`` left ``T,pw9 x@`` in ``multirun.yaml``. Masked everywhere, and the
password still reaches MLflow."""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml
from omegaconf import OmegaConf

from cifar_dist.common.redaction import RedactingFilter, redact_text, redact_uri, tracking_credentials
from cifar_dist.common.uri_userinfo import well_formed, without_userinfo
from cifar_dist.rundir.saved_config import redact_yaml_file
from helpers.cli import compose_cfg

HOST = "127.0.0.1:9/x"
# Passwords typed without percent-encoding (and one with it), each with the words that must never be shown.
TYPED = {
    "slash": "SECRq/w9",
    "query-and-fragment": "SE?CRq#w9",
    "at-comma-space": "SECR@T,pw9 x",
    "spaces": "Pfx9 phrase9 nine9",
    "encoded": "SECRq%2Fw9",
}


def secret_words(password: str) -> list:
    return re.findall(r"[A-Za-z0-9]{2,}", password.replace("%2F", " "))


def hydra_forms(uri: str) -> list:
    """``tracking.uri=<uri>`` as typed (quoted, or not), as a sweep's points write it (escaped with Hydra's
    ``escape_special_characters``: ``http\\://alice\\:...``), as Hydra's ``override_dirname`` joins it and as its
    launch line shows it."""
    from hydra._internal.grammar.utils import escape_special_characters

    unquoted = f"tracking.uri={uri}"
    return [
        f"tracking.uri='{uri}'",
        f'tracking.uri="{uri}"',
        f"tracking.uri={escape_special_characters(uri)}",
        unquoted,
        f"data=sample,{unquoted},tracking=mlflow",
        f"[HYDRA] \t#0 : data=sample {unquoted} launcher=mpirun",
    ]


@pytest.mark.parametrize("password", TYPED.values(), ids=TYPED.keys())
def test_a_typed_password_is_masked_in_every_form_hydra_and_the_logs_write(password, tmp_path):
    uri = f"http://alice:{password}@{HOST}"
    mlflow_error = f"tracking: opening the run failed at {redact_uri(uri)} (API request to {well_formed(uri)}/api)"
    texts = {"uri": redact_uri(uri), "mlflow": redact_text(mlflow_error)}
    for form in hydra_forms(uri):
        texts[form] = redact_text(form)
        assert "127.0.0.1" in texts[form] and "alice" not in texts[form], texts[form]
    path = tmp_path / "saved.yaml"
    OmegaConf.save(OmegaConf.create({"tracking": {"uri": uri}, "overrides": hydra_forms(uri)}), path)
    redact_yaml_file(path)
    saved = yaml.safe_load(path.read_text())
    texts["saved"] = path.read_text()
    assert saved["tracking"]["uri"] == f"http://{HOST}", saved
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "#0 : %s", (f"tracking.uri={uri}",), None)
    RedactingFilter().filter(record)
    texts["log"] = record.getMessage()
    shown = {name: text for name, text in texts.items() if any(w in text for w in secret_words(password))}
    assert shown == {}


def test_a_sweep_that_split_a_typed_password_at_its_comma_leaves_none_of_it_in_multirun_yaml(tmp_path):
    """Issue 57's sweep: unquoted, ``SECR@T,pw9 x`` was two points; the task overrides as typed kept ``T,pw9 x@``."""
    path = tmp_path / "multirun.yaml"
    typed = "tracking.uri=http://alice:SECR@T,pw9 x@127.0.0.1:9/x"
    dirname = f"data=sample,launcher=mpirun,{typed},tracking=mlflow"
    OmegaConf.save(
        OmegaConf.create({"hydra": {"overrides": {"task": [typed]}, "job": {"override_dirname": dirname}}}), path
    )
    redact_yaml_file(path)
    text = path.read_text()
    assert "SECR" not in text and "pw9" not in text and "T," not in text, text
    assert "tracking.uri=http://127.0.0.1:9/x" in text and "tracking=mlflow" in text


LOOK_ALIKES = [
    "see http://host/x and mail bob@example.com",
    "pip install git+https://github.com/org/repo@v1.0#egg=x",
    "sqlite:////data/runs@2026/mlflow.db",
    "tracking at http://mlflow:5000/ failed; ask admin@example.com",
    "tracking.uri=http://h/,+launcher.env.EMAIL=bob@example.com",
]


def test_an_at_sign_that_is_no_userinfos_end_is_left_alone():
    assert [without_userinfo(text) for text in LOOK_ALIKES] == LOOK_ALIKES


@pytest.mark.parametrize("password", TYPED.values(), ids=TYPED.keys())
def test_the_typed_password_reaches_mlflow_and_the_ranks_as_typed(password, tmp_path):
    """The ranks get the URI without it and the password in MLflow's variables; the launching process hands
    MLflow the URI percent-encoded, which parses to the host the user meant."""
    from urllib.parse import unquote, urlsplit

    from cifar_dist.launchers.base import JobSpec
    from cifar_dist.tracking.settings import export_credentials

    uri = f"http://alice:{password}@{HOST}"
    meant = unquote(password)
    assert tracking_credentials(uri) == {"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": meant}
    parts = urlsplit(well_formed(uri))
    assert (parts.hostname, parts.port, parts.path, unquote(parts.password)) == ("127.0.0.1", 9, "/x", meant)
    typed = ["tracking=mlflow", f"tracking.uri='{uri}'", "launcher=mpirun"]
    cfg = compose_cfg(*typed)
    job = JobSpec(cfg=cfg, output_dir=tmp_path, original_cwd=tmp_path, task_overrides=typed)
    command = " ".join(job.child_command())
    assert "tracking.uri='http://127.0.0.1:9/x'" in command, command
    assert not any(w in command for w in secret_words(password)), command
    env = {}
    export_credentials(cfg, env)
    assert (env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"]) == ("alice", meant)


class RecordingTracker(BaseHTTPRequestHandler):
    """A tracking server that knows no experiment and records each request's path and Authorization header."""

    seen: list = []

    def do_GET(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such experiment"}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_mlflow_gets_the_typed_password_from_the_launching_process(monkeypatch):
    """Typed with a raw ``/``, the password moved MLflow's host ("Invalid url"); now it authenticates."""
    pytest.importorskip("mlflow", reason="tracking extra not installed")
    from cifar_dist.tracking.client import client_for

    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    RecordingTracker.seen = []
    server = HTTPServer(("127.0.0.1", 0), RecordingTracker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        uri = f"http://alice:SECRq/w9 x@127.0.0.1:{server.server_port}/x"
        assert client_for(uri).get_experiment_by_name("cifar_dist") is None
    finally:
        server.shutdown()
        server.server_close()
    (path, auth), *_ = RecordingTracker.seen
    assert path.startswith("/x/api/2.0/mlflow/experiments/get-by-name"), path
    assert base64.b64decode(auth.split()[1]).decode() == "alice:SECRq/w9 x"
