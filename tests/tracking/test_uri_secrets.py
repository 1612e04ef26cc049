"""A tracking URI's secrets (password, SAS query tokens) are masked everywhere the rest of the URI appears
(issue 31, hostile 7): the console, the job log, the run dir's ``.hydra/*.yaml`` (issue 37), ``--cfg job``
and a typo's one-line error; the password as typed, with a raw ``/`` and a space (issue 57, item 1)."""

from helpers.cli import assert_ok, one_error_line, run_cli
from helpers.imports_record import is_trainer, loaded, run_recording_imports

URI = (
    "http://alice:S3cretPW/w9 x@127.0.0.1:9/x"
    "?sig=SIGsecret&se=2031-01-01T00%3A00Z&sp=racwdl&sv=2022-11-02&token=TOKsecret"
)
SECRETS = ("S3cretPW", "w9 x", "SIGsecret", "2031-01-01", "racwdl", "2022-11-02", "TOKsecret")


def leaked(text: str) -> list:
    return [s for s in SECRETS if s in text]


def test_the_console_and_the_job_log_show_the_uri_without_its_secrets(tiny_data, tmp_path):
    """Its processes record the modules they load: this run is also test_lazy_imports's control, a run with
    tracking=mlflow whose trainer loads MLflow (else that module's checks of what a run does not load prove nothing)."""
    run_dir = tmp_path / "run"
    proc, records = run_recording_imports(
        tmp_path,
        tiny_data,
        "trainer.verbose=0",
        "tracking=mlflow",
        f"tracking.uri='{URI}'",
        "tracking.http_max_retries=0",
        "tracking.http_timeout_s=5",
    )
    assert any(loaded(r, "mlflow") for r in records if is_trainer(r))
    text = proc.stdout + proc.stderr + (run_dir / "cifar_dist.log").read_text()
    text += "".join(p.read_text() for p in sorted((run_dir / ".hydra").glob("*.yaml")))  # issue 37 item 3
    assert "127.0.0.1:9" in text and leaked(text) == [], text[-3000:]  # the guard's warning names the server


def test_cfg_job_prints_the_uri_without_its_secrets():
    proc = run_cli("tracking=mlflow", f"tracking.uri='{URI}'", "--cfg", "job")
    assert_ok(proc)
    assert "http://127.0.0.1:9/x?sig=" in proc.stdout and leaked(proc.stdout + proc.stderr) == [], proc.stdout


def test_a_typos_error_line_shows_the_uri_without_its_secrets():
    line = one_error_line(run_cli("tracking=mlflow", f"tracking.urii='{URI}'"))
    assert "tracking.urii" in line and "127.0.0.1:9" in line and leaked(line) == [], line
