"""What counts as a secret, and text with the secrets taken out: the one home for both.

A secret is found by its name (a config key or an environment variable
called ``*password``/``*token``/``*secret``/``*key``...) or by its place in a
URI: the ``user:password@`` of ``https://user:password@host`` and the values
of query parameters such as ``?sig=...`` or ``&token=...``. Values of
environment variables known to be secret are also taken out wherever they
appear. Everything that leaves the launching process as text -- MLflow params,
tags and artifacts, cluster job files, rank command lines, log lines -- goes
through ``redact_text`` (or ``redact_uri`` for a URI alone).

A tracking server's ``user:password`` is not lost: ``tracking_credentials``
turns it into MLflow's own variables, which the ranks inherit (or a cluster
gets through the environment or its secret store), never a command line.
"""
from __future__ import annotations

import logging
import re
from typing import Dict, List, Mapping, Optional
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from cifar_dist.environment import snapshot

MASK = "<redacted>"
# A config key or an environment variable whose value is a secret.
SECRET_NAME = re.compile(r"(password|passwd|token|secret|credential|(^|_)key)$", re.IGNORECASE)
# Secret-bearing environment variables whose names do not say so.
SECRET_ENV = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN", "AWS_SECRET_ACCESS_KEY",
              "AWS_SESSION_TOKEN", "DATABRICKS_TOKEN", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
# Query parameters that carry a credential (SAS signatures, tokens, API keys, passwords).
SECRET_QUERY = re.compile(r"(sig|signature|token|pass|pwd|secret|key|credential|auth)", re.IGNORECASE)
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`,;]+")
_MIN_SECRET_LEN = 6  # shorter values ("1", "true") would mask harmless text


def redact_uri(uri: str) -> str:
    """``uri`` without ``user:password@`` and with the values of credential query parameters masked."""
    try:
        parts = urlsplit(uri)
        has_userinfo = parts.username is not None or parts.password is not None
        host, port = parts.hostname or "", parts.port
    except ValueError:  # not a URI after all (a bad port, ...): leave it
        return uri
    netloc = (f"{host}:{port}" if port else host) if has_userinfo else parts.netloc
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(SECRET_QUERY.search(name) for name, _ in pairs):
            query = urlencode([(n, MASK if SECRET_QUERY.search(n) else v) for n, v in pairs], safe="<>")
    if netloc == parts.netloc and query == parts.query:
        return uri
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def secret_values(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """The values of the environment variables known to be secret (of ``os.environ`` by default), longest first."""
    values = {v for k, v in snapshot(environ).items()
              if (k in SECRET_ENV or SECRET_NAME.search(k)) and len(v or "") >= _MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, environ: Optional[Mapping[str, str]] = None, extra: Optional[str] = None) -> str:
    """``text`` with every URI's credentials masked, and every secret value (``extra`` too) replaced by a mask."""
    if not text:
        return text
    out = _URI.sub(lambda m: redact_uri(m.group(0)), text)
    for value in secret_values(environ) + ([extra] if extra else []):
        out = out.replace(value, MASK)
    return out


def tracking_credentials(uri: Optional[str]) -> Dict[str, str]:
    """MLflow's ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` for the ``user:password@`` of a tracking URI ({} without)."""
    try:
        parts = urlsplit(str(uri or ""))
        user, password = parts.username, parts.password
    except ValueError:
        return {}
    out = {}
    if user is not None:
        out["MLFLOW_TRACKING_USERNAME"] = unquote(user)
    if password is not None:
        out["MLFLOW_TRACKING_PASSWORD"] = unquote(password)
    return out


class RedactingFilter(logging.Filter):
    """A log handler's filter: the record's message with its secrets masked (the record is then formatted as usual)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


def redact_logs(logger: Optional[logging.Logger] = None) -> None:
    """Every handler of ``logger`` (the root logger: Hydra's console and job log file) masks secrets; idempotent."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


