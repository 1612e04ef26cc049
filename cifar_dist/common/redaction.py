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
from typing import Any, Dict, List, Mapping, Optional
from urllib.parse import unquote, urlsplit, urlunsplit

from cifar_dist.common.environment import snapshot

MASK = "<redacted>"
# A config key or an environment variable whose value is a secret.
SECRET_NAME = re.compile(r"(password|passwd|token|secret|credential|(^|_)key)$", re.IGNORECASE)
# Secret-bearing environment variables whose names do not say so.
SECRET_ENV = (
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "DATABRICKS_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
)
# Query parameters that carry a credential (signatures, tokens, API keys, passwords), by a part of their name...
SECRET_QUERY = re.compile(r"(sig|signature|token|pass|pwd|secret|key|credential|auth)", re.IGNORECASE)
# ...and the fields of an Azure shared access signature (SAS), whose names do not say so.
SAS_QUERY = frozenset(
    {
        "sv",
        "ss",
        "srt",
        "sp",
        "se",
        "st",
        "spr",
        "sr",
        "si",
        "sdd",
        "ses",
        "skoid",
        "sktid",
        "skt",
        "ske",
        "sks",
        "skv",
        "saoid",
        "suoid",
        "scid",
    }
)
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`,;]+")
# A query parameter anywhere in text (a whole URI, or a client's "url: /x?sig=..."); a masked value stays as it is.
_QUERY_PARAM = re.compile(r"(?P<name>(?<=[?&])[A-Za-z0-9_.~-]+)=(?P<value>" + re.escape(MASK) + r"|[^&#\s'\"<>`,;]*)")
_MIN_SECRET_LEN = 6  # shorter values ("1", "true") would mask harmless text
# cifar_dist's own keys whose names look secret but are not: the kind of Azure credential to use (default, cli...)
# and the path of a public key. Masking them would break a re-run from the run's saved config.
NOT_SECRET_KEYS = frozenset({"launcher.credential", "launcher.ssh_public_key"})
# An assignment whose name says it is a secret, as in an override (``+launcher.env.MY_TOKEN=...``) or a shell
# line (``DB_PASSWORD=...``): the name's last dotted part is matched by SECRET_NAME. A quoted value ends at its quote.
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<name>(?<![A-Za-z0-9_.~+-])[+~]{0,2}(?:[A-Za-z0-9_-]+\.)*[A-Za-z0-9_-]+)="
    r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s'\"<>`,;]+)"
)


def is_secret_query(name: str) -> bool:
    """Whether a URI's query parameter ``name`` carries a credential (``sig``, ``token``, a SAS field...)."""
    return bool(SECRET_QUERY.search(name)) or name.lower() in SAS_QUERY


def _mask_query_values(text: str) -> str:
    def mask(m: re.Match) -> str:
        secret = is_secret_query(m.group("name")) and m.group("value") not in ("", MASK)
        return f"{m.group('name')}={MASK}" if secret else m.group(0)

    return _QUERY_PARAM.sub(mask, text)


def _without_userinfo(uri: str) -> str:
    try:
        parts = urlsplit(uri)
        has_userinfo = parts.username is not None or parts.password is not None
        host, port = parts.hostname or "", parts.port
    except ValueError:  # not a URI after all (a bad port, ...): leave it
        return uri
    if not has_userinfo:
        return uri
    return urlunsplit((parts.scheme, f"{host}:{port}" if port else host, parts.path, parts.query, parts.fragment))


def is_secret_key(dotted: str) -> bool:
    """Whether the config key ``dotted`` (``launcher.env.MY_TOKEN``) holds a secret, by its last part's name."""
    return bool(SECRET_NAME.search(dotted.rsplit(".", 1)[-1])) and dotted not in NOT_SECRET_KEYS


def secret_assignments(text: str) -> List[str]:
    """The names that ``text`` (an override, a command line) assigns a secret-named value to."""
    return [
        m.group("name").lstrip("+~")
        for m in _SECRET_ASSIGNMENT.finditer(text)
        if is_secret_key(m.group("name").lstrip("+~"))
    ]


def _mask_secret_assignments(text: str) -> str:
    def mask(m: re.Match) -> str:
        name = m.group("name").lstrip("+~")
        secret = is_secret_key(name) and m.group("value").strip("'\"") not in ("", MASK)
        return f"{m.group('name')}={MASK}" if secret else m.group(0)

    return _SECRET_ASSIGNMENT.sub(mask, text)


def redact_uri(uri: str) -> str:
    """``uri`` without ``user:password@`` and with the values of credential query parameters masked."""
    return _mask_query_values(_without_userinfo(uri))


def secret_values(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """The values of the environment variables known to be secret (of ``os.environ`` by default), longest first."""
    values = {
        v
        for k, v in snapshot(environ).items()
        if (k in SECRET_ENV or SECRET_NAME.search(k)) and len(v or "") >= _MIN_SECRET_LEN
    }
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, environ: Optional[Mapping[str, str]] = None, extra: Optional[str] = None) -> str:
    """``text`` with every URI's credentials masked, the value of every assignment to a secret's name
    (``+launcher.env.MY_TOKEN=...``: a job description quotes the command line) and every secret value
    (``extra`` too) replaced by a mask."""
    if not text:
        return text
    out = _mask_query_values(_URI.sub(lambda m: _without_userinfo(m.group(0)), text))
    out = _mask_secret_assignments(out)
    for value in secret_values(environ) + ([extra] if extra else []):
        out = out.replace(value, MASK)
    return out


def redact_config(node: Any, path: str = "") -> Any:
    """A config as plain data (dicts, lists, scalars: ``OmegaConf.to_container``) with its secrets masked: the
    value of a key named as a secret (``launcher.env.MY_TOKEN``), and secrets inside any string (``redact_text``:
    a tracking URI's ``user:password@``, an override ``+launcher.env.MY_TOKEN=...`` in Hydra's own record)."""
    if isinstance(node, dict):
        return {k: redact_config(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [redact_config(v) for v in node]
    if is_secret_key(path) and node not in (None, "", MASK) and not isinstance(node, bool):
        return MASK
    return redact_text(node) if isinstance(node, str) else node


def uri_query_secrets(uri: Optional[str]) -> List[str]:
    """The names of the credential query parameters of ``uri`` (``?sig=...&token=...``), in order."""
    try:
        query = urlsplit(str(uri or "")).query
    except ValueError:
        return []
    names = [part.split("=", 1)[0] for part in query.split("&") if "=" in part]
    return [n for n in names if is_secret_query(n)]


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


class RedactingWriter:
    """A text stream whose writes have their secrets masked, for output that is neither a log record nor ours
    (Hydra's ``--cfg``/``--info`` print the composed config); anything else is the wrapped stream's."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(redact_text(text))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


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
