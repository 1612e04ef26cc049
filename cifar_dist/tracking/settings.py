"""Where a job's runs go and how long a tracking server may take: the tracking config made concrete."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, MutableMapping, Optional

from cifar_dist.common.redaction import redact_uri as redact  # noqa: F401  (the one home of redaction)
from cifar_dist.common.redaction import tracking_credentials, uri_query_secrets

DEFAULT_DB = Path("outputs") / "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"  # beside a SQLite store: where its runs' artifacts go

# tracking.<key> -> MLflow's own variable; MLflow reads them at every request.
HTTP_LIMITS = {
    "http_timeout_s": "MLFLOW_HTTP_REQUEST_TIMEOUT",
    "http_max_retries": "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    "http_backoff_factor": "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
}


def tracking_conf(cfg: Any) -> Optional[Any]:
    """The config's tracking node when it asks for MLflow, else None (also in configs saved before tracking existed)."""
    conf = cfg.get("tracking") if cfg is not None else None
    if conf is None:
        return None
    backend = conf.get("backend")
    return conf if str(getattr(backend, "value", backend)) == "mlflow" else None


def resolve_uri(configured: Optional[str], environ: Mapping[str, str] = os.environ, cwd: Optional[Path] = None) -> str:
    """tracking.uri, else $MLFLOW_TRACKING_URI, else the SQLite file outputs/mlflow.db; a relative SQLite path made
    absolute.

    Absolute, so the URI recorded in a run dir still names the same file
    when an import is started from another directory.
    """
    uri = configured or environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_DB}"
    path = sqlite_path(uri)
    if path is not None and not path.is_absolute():
        uri = f"sqlite:///{(cwd or Path.cwd()) / path}"
    return uri


def sqlite_path(uri: str) -> Optional[Path]:
    """The database file of a ``sqlite:///`` URI (None for other stores)."""
    prefix = "sqlite:///"
    return Path(uri[len(prefix) :]) if uri.startswith(prefix) else None


def artifact_location(uri: str) -> Optional[str]:
    """Where a new experiment keeps its artifacts: beside a SQLite file; a server decides for itself (None)."""
    path = sqlite_path(uri)
    return (path.parent / ARTIFACTS_DIR).as_uri() if path is not None else None


# Set by the user (either), MLflow's telemetry is as they say; otherwise it is off (see quiet_mlflow).
TELEMETRY_ENV = ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")


def quiet_mlflow(environ: MutableMapping[str, str] = os.environ) -> None:
    """MLflow's usage telemetry off, unless the user set ``MLFLOW_DISABLE_TELEMETRY`` or ``DO_NOT_TRACK``.

    cifar_dist sends nothing anywhere unasked: MLflow would otherwise report usage to its
    makers from a thread of every process that imports it (a thread that also changes the
    environment under other threads). MLflow reads the variable when it is first imported, so this
    runs when ``cifar_dist.tracking`` is (every use of MLflow goes through it); the ranks inherit it.
    """
    if not any(name in environ for name in TELEMETRY_ENV):
        environ["MLFLOW_DISABLE_TELEMETRY"] = "true"


def apply_http_limits(conf: Any, environ: MutableMapping[str, str] = os.environ) -> None:
    """Bound MLflow's HTTP retries and timeouts by the config, unless the user set MLflow's variables."""
    for key, variable in HTTP_LIMITS.items():
        value = conf.get(key)
        if value is not None:
            environ.setdefault(variable, str(value))


CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


def node_credentials(cfg: Any, environ: Mapping[str, str] = os.environ) -> Dict[str, str]:
    """What cluster nodes that log themselves (``tracking.remote=nodes``) need to reach the tracker, for the
    service's secret store: the URI's ``user:password@`` and MLflow's credential variables ({} otherwise)."""
    conf = tracking_conf(cfg)
    if conf is None or str(conf.get("remote", "import")) != "nodes":
        return {}
    found = {name: environ[name] for name in CREDENTIAL_ENV if environ.get(name)}
    return {**found, **tracking_credentials(conf.uri)}


def handed_on_uri_problems(cfg: Any) -> List[str]:
    """A tracking URI with a credential in its query (``?sig=...``), for a launcher that hands the job to other
    processes or a cluster: refused, one phrase. Their commands and job files carry the URI masked, so the
    credential would arrive as ``<redacted>`` and tracking there could not authenticate; MLflow takes a
    credential from its own variables instead, which reach the ranks and cluster jobs through the environment."""
    conf = tracking_conf(cfg)
    names = uri_query_secrets(conf.get("uri")) if conf is not None else []
    if not names:
        return []
    return [
        f"tracking.uri carries a credential in its query ({', '.join(dict.fromkeys(names))}), which this launcher "
        "would hand on masked: give the URI without it and the credential in MLFLOW_TRACKING_TOKEN (or "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD) in the environment"
    ]


# The names export_credentials set itself (not the user), so that the next job of a sweep replaces them.
EXPORTED_ENV = "CIFAR_DIST_EXPORTED_CREDENTIALS"


def export_credentials(cfg: Any, environ: MutableMapping[str, str] = os.environ) -> None:
    """The launching process: a tracking URI's ``user:password@`` into MLflow's own variables.

    The ranks get the URI without them (``JobSpec.child_overrides`` redacts
    every override) and inherit these variables instead, as ``launcher=mpirun``
    and Slurm forward them; a variable the user set wins. What an earlier job
    of this process (a sweep's point) exported is replaced by this job's, or
    removed where its URI has none: a point never sends another's credentials.
    """
    for name in [n for n in environ.get(EXPORTED_ENV, "").split(",") if n]:
        environ.pop(name, None)
    environ.pop(EXPORTED_ENV, None)
    exported = []
    for name, value in job_credentials(cfg).items():
        if name not in environ:  # (one the user set wins)
            environ[name] = value
            exported.append(name)
    if exported:
        environ[EXPORTED_ENV] = ",".join(exported)


def job_credentials(cfg: Any) -> Dict[str, str]:
    """The credentials a job's tracking URI carries, as MLflow's variables ({} without tracking or userinfo)."""
    conf = tracking_conf(cfg)
    return tracking_credentials(conf.uri) if conf is not None else {}
