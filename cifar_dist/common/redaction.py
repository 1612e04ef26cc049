"""What counts as a secret, and text with the secrets taken out: the one home for both.

A secret is found by its name (a config key or an environment variable
holding ``password``/``token``/``secret``/``credential``/``apikey``/
``connection_string``, ``key`` as a word, or ending in ``_pass``/``_pwd``/
``_pat``/``_sas``: ``SECRET_NAME``) or by its place in a
URI: the ``user:password@`` of ``https://user:password@host``, as the user
typed it, percent-encoded or not (``https://alice:SECRq/w9@host``: the
userinfo runs to the last ``@`` a host follows; ``uri_userinfo.py``), and the
values of query parameters such as ``?sig=...`` or ``&token=...``. Values of
environment variables known to be secret are also taken out where they stand
as a whole value (``x=VALUE``, ``"VALUE"``, a word of their own), never as a
part of another one (a path ``/data/VALUE/train`` stays as it is). Everything
that leaves the launching process as text -- MLflow params, tags and
artifacts, cluster job files, rank command lines, log lines -- goes through
``redact_text`` (or ``redact_uri`` for a URI alone); a printed or saved
config through ``redact_config`` (``redact_yaml`` for its YAML text).

Text is masked in every form Hydra writes an override in: as typed, quoted
(``'http://alice:PW@host/'``) or escaped, as a sweep's points have them
(``http\\://alice\\:PW@host/``, Hydra's ``escape_special_characters``).

A tracking server's ``user:password`` is not lost: ``tracking_credentials``
turns it into MLflow's own variables, which the ranks inherit (or a cluster
gets through the environment or its secret store), never a command line; the
launching process hands MLflow the URI with it percent-encoded.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Dict, List, Mapping, Optional
from urllib.parse import unquote, urlsplit

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cifar_dist.common.environment import snapshot
from cifar_dist.common.uri_userinfo import split_userinfo, well_formed, without_userinfo

MASK = "<redacted>"
# A config key or an environment variable whose value is a secret, by a word in its name:
# - a word no harmless name holds, anywhere, where no letter follows it (``SECRET_KEY_BASE``, ``MY_TOKEN_FILE``,
#   ``apitoken``, ``DB_PASSWORD``, ``AZURE_STORAGE_CONNECTION_STRING``; not ``TOKENIZERS_PARALLELISM``,
#   ``tokens_seen`` or ``secretary``);
# - ``key`` as a word of its own, anywhere (``API_KEY``, ``AWS_ACCESS_KEY_ID``; not ``KEYRING`` or ``MONKEY``);
# - ``pass``, ``pwd``, ``pat``, ``sas`` as the last word only (``DB_PASS``, ``GITHUB_PAT``; not ``compass``,
#   ``path``, ``pass_through`` or ``pwd_dir``, where they mean something else).
SECRET_NAME = re.compile(
    r"(password|passwd|passphrase|token|secret|credentials?|apikey|connection_?string)(?![a-z])"
    r"|(?<![a-z])key(?![a-z])"
    r"|(^|_)(pass|pwd|pat|sas)$",
    re.IGNORECASE,
)
# Environment variables whose names look secret but are not: the shell's working directory.
NOT_SECRET_ENV = frozenset({"PWD"})
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
# The characters Hydra escapes with a backslash in an override's unquoted value (its grammar's ESC token).
_HYDRA_SPECIAL = r"\\()\[\]{}:=, \t"
# A query parameter anywhere in text (a whole URI, or a client's "url: /x?sig=..."), its ``=`` escaped or not; a
# masked value stays as it is.
_QUERY_PARAM = re.compile(
    r"(?P<name>(?<=[?&])[A-Za-z0-9_.~-]+)(?P<eq>\\?=)(?P<value>" + re.escape(MASK) + r"|(?:\\.|[^&#\s'\"<>`,;\\])*)"
)
# What may stand on either side of a secret variable's value for it to be a whole value: the text's ends,
# white space, quotes, brackets and the separators of assignments, lists and query parameters (not ``/``, ``.``,
# ``_``, ``-``: ``/data/VALUE/train`` and ``VALUE.tar`` are other values). A sentence's full stop may follow it.
_VALUE_EDGE = r"\s'\"`=,;:&|()\[\]{}<>"
_MIN_SECRET_LEN = 6  # shorter values ("1", "true") would mask harmless text
# cifar_dist's own keys whose names look secret but are not: the kind of Azure credential to use (default, cli...),
# the path of a public key, and where Batch AI finds the storage key (a Key Vault's id and the URL of its secret).
# Masking them would break a re-run from the run's saved config.
NOT_SECRET_KEYS = frozenset(
    {"launcher.credential", "launcher.ssh_public_key", "launcher.key_vault_id", "launcher.key_vault_secret_url"}
)
# An assignment whose name says it is a secret, as in an override (``+launcher.env.MY_TOKEN=...``) or a shell
# line (``DB_PASSWORD=...``): the name's last dotted part is matched by SECRET_NAME. A quoted value ends at its
# quote; an unquoted one at white space or at a comma that starts the next assignment (Hydra's
# ``override_dirname``: ``a=1,b=2``), and takes Hydra's escapes (``a\ b``) and a sweep's commas (``a,b``).
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<name>(?<![A-Za-z0-9_.~+-])[+~]{0,2}(?:[A-Za-z0-9_-]+\.)*[A-Za-z0-9_-]+)="
    r"(?P<value>'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\""
    r"|(?:\\.|[^\s'\"<>`;,\\]|,(?![+~]{0,2}[A-Za-z0-9_./-]+=))+)"
)

# An entry of a mapping in a value, as Hydra's dict form (``+hydra.job.env_set={MY_TOKEN: ...}``) or YAML's flow
# style writes it, its name quoted or not: a secret when its name is. A quoted value ends at its quote, an unquoted
# one at the entry's ``,`` or ``}`` (Hydra's escapes taken); a nested mapping, a list or an interpolation is no value.
_SECRET_ENTRY = re.compile(
    r"(?<=[{,])(?P<lead>\s*)(?P<q>['\"]?)(?P<name>[A-Za-z0-9_.-]+)(?P=q)(?P<colon>\s*:\s*)"
    r"(?P<value>'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|(?:\\.|[^\s,{}\[\]'\"\\$])(?:\\.|[^,{}\\])*)"
)
_OVERRIDE_KEY = re.compile(r"[+~]{0,2}(?P<key>[A-Za-z0-9_.-]+)=")


def hydra_escaped(text: str) -> str:
    """``text`` as Hydra writes it in an unquoted override value (``http\\://h``: a sweep's points)."""
    return re.sub(f"([{_HYDRA_SPECIAL}])", r"\\\1", text)


def is_secret_query(name: str) -> bool:
    """Whether a URI's query parameter ``name`` carries a credential (``sig``, ``token``, a SAS field...)."""
    return bool(SECRET_QUERY.search(name)) or name.lower() in SAS_QUERY


def _mask_query_values(text: str) -> str:
    def mask(m: re.Match) -> str:
        secret = is_secret_query(m.group("name")) and m.group("value") not in ("", MASK)
        return f"{m.group('name')}{m.group('eq')}{MASK}" if secret else m.group(0)

    return _QUERY_PARAM.sub(mask, text)


def is_secret_key(dotted: str) -> bool:
    """Whether the config key ``dotted`` (``launcher.env.MY_TOKEN``) holds a secret, by its last part's name."""
    return bool(SECRET_NAME.search(dotted.rsplit(".", 1)[-1])) and dotted not in NOT_SECRET_KEYS


def is_secret_env(name: str) -> bool:
    """Whether the environment variable ``name`` holds a secret: by its name, or one known to (``SECRET_ENV``)."""
    return name in SECRET_ENV or (bool(SECRET_NAME.search(name)) and name not in NOT_SECRET_ENV)


def secret_assignments(text: str) -> List[str]:
    """The names that ``text`` (an override, a command line) assigns a secret-named value to, in the dotted form
    (``+hydra.job.env_set.MY_TOKEN=...``) or the dict form (``+hydra.job.env_set={MY_TOKEN: ...}``: named
    ``hydra.job.env_set.MY_TOKEN`` when ``text`` is one override)."""
    dotted = [m.group("name").lstrip("+~") for m in _SECRET_ASSIGNMENT.finditer(text)]
    override = _OVERRIDE_KEY.match(text)
    prefix = f"{override.group('key')}." if override else ""
    entries = [prefix + m.group("name") for m in _SECRET_ENTRY.finditer(text) if _is_secret_value(m.group("value"))]
    return [name for name in dotted + entries if is_secret_key(name)]


def _is_secret_value(value: str) -> bool:
    return value.strip().strip("'\"") not in ("", MASK)


def _mask_secret_assignments(text: str) -> str:
    def mask(m: re.Match) -> str:
        secret = is_secret_key(m.group("name").lstrip("+~")) and _is_secret_value(m.group("value"))
        return f"{m.group('name')}={MASK}" if secret else m.group(0)

    def mask_entry(m: re.Match) -> str:
        secret = is_secret_key(m.group("name")) and _is_secret_value(m.group("value"))
        return m.group(0)[: m.start("value") - m.start()] + MASK if secret else m.group(0)

    return _SECRET_ENTRY.sub(mask_entry, _SECRET_ASSIGNMENT.sub(mask, text))


def redact_uri(uri: str) -> str:
    """``uri`` without ``user:password@`` and with the values of credential query parameters masked."""
    return _mask_query_values(without_userinfo(uri))


def secret_values(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """The values of the environment variables known to be secret (of ``os.environ`` by default), longest first."""
    values = {v for k, v in snapshot(environ).items() if is_secret_env(k) and len(v or "") >= _MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def _mask_whole_values(text: str, values: List[str]) -> str:
    """``text`` with each of ``values`` masked where it stands as a whole value (as written or Hydra-escaped),
    never where it is a part of another (``_VALUE_EDGE``)."""
    forms = sorted({form for v in values for form in (v, hydra_escaped(v))}, key=len, reverse=True)
    if not forms:
        return text
    whole = re.compile(
        f"(?<![^{_VALUE_EDGE}])(?:{'|'.join(map(re.escape, forms))})(?=$|[{_VALUE_EDGE}]|[.!?](?:\\s|$))"
    )
    return whole.sub(MASK, text)


def redact_text(text: str, environ: Optional[Mapping[str, str]] = None, extra: Optional[str] = None) -> str:
    """``text`` with every URI's credentials masked, the value of every assignment to a secret's name
    (``+launcher.env.MY_TOKEN=...``: a job description quotes the command line) and every secret value
    (``extra`` too) standing as a whole value replaced by a mask."""
    if not text:
        return text
    out = _mask_query_values(without_userinfo(text))
    out = _mask_secret_assignments(out)
    return _mask_whole_values(out, secret_values(environ) + ([extra] if extra else []))


def redact_config(node: Any, path: str = "") -> Any:
    """A config as plain data (dicts, lists, scalars: ``OmegaConf.to_container``) with its secrets masked: the
    value of a key named as a secret (``launcher.env.MY_TOKEN``), and secrets inside any string (``redact_text``:
    a tracking URI's ``user:password@``, an override ``+launcher.env.MY_TOKEN=...`` in Hydra's own record)."""
    if isinstance(node, dict):
        return {k: redact_config(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [redact_config(v, path) for v in node]
    if is_secret_key(path) and node not in (None, "", MASK) and not isinstance(node, bool):
        return MASK
    return redact_text(node) if isinstance(node, str) else node


def redact_yaml(text: str, path: str = "") -> str:
    """YAML text of a config (or of its node at ``path``: ``--cfg job --package launcher``) masked as
    ``redact_config`` masks the config itself: the values of secret-named keys too, which plain text does not
    show as names (``MY_TOKEN: ...``). Text that is no YAML container goes through ``redact_text``; a lone value
    is masked whole when ``path`` names a secret (``--package launcher.env.MY_TOKEN``)."""
    try:
        loaded = yaml.safe_load(text)
        saved = (
            OmegaConf.to_container(OmegaConf.create(text), resolve=False) if isinstance(loaded, (dict, list)) else None
        )
    except (yaml.YAMLError, OmegaConfBaseException, ValueError):
        return redact_text(text)
    if saved is not None:
        clean = redact_config(saved, path)
        return text if clean == saved else OmegaConf.to_yaml(OmegaConf.create(clean))
    if isinstance(loaded, (str, int, float)) and not isinstance(loaded, bool) and is_secret_key(path):
        return MASK + text[len(text.rstrip()) :]
    return redact_text(text)


def uri_query_secrets(uri: Optional[str]) -> List[str]:
    """The names of the credential query parameters of ``uri`` (``?sig=...&token=...``), in order."""
    try:
        query = urlsplit(well_formed(str(uri or ""))).query
    except ValueError:
        return []
    names = [part.split("=", 1)[0] for part in query.split("&") if "=" in part]
    return [n for n in names if is_secret_query(n)]


def tracking_credentials(uri: Optional[str]) -> Dict[str, str]:
    """MLflow's ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` for the ``user:password@`` of a tracking URI ({} without),
    read as the user typed it (a password with a raw ``/``, ``?``, ``#``, ``@`` or space: ``uri_userinfo.py``)."""
    parts = split_userinfo(uri)
    if parts is None:
        return {}
    out = {"MLFLOW_TRACKING_USERNAME": unquote(parts.user)}
    if parts.password is not None:
        out["MLFLOW_TRACKING_PASSWORD"] = unquote(parts.password)
    return out


class RedactingWriter:
    """A text stream whose writes have their secrets masked, for output that is neither a log record nor ours
    (Hydra's own errors on stderr); with ``config_at``, each write is read as the YAML of the config's node at
    that path (Hydra's ``--cfg``/``--info`` print the composed config: ``redact_yaml``). Anything else is the
    wrapped stream's."""

    def __init__(self, stream, config_at: Optional[str] = None) -> None:
        self._stream = stream
        self._config_at = config_at

    def write(self, text: str) -> int:
        if self._config_at is None:
            return self._stream.write(redact_text(text))
        return self._stream.write(redact_yaml(text, self._config_at))

    def close(self) -> None:
        """Nothing: the wrapped stream (the process's stderr) is not this wrapper's to close. A logging handler
        that kept this wrapper as its stream (absl's, imported by the engine inside ``app.main``) closes it at
        ``logging.shutdown``; forwarded, that closed the process's stderr for everything after."""

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
