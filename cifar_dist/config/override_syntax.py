"""Hydra's override grammar, as cifar_dist writes overrides for another process or a person: the one quoting rule.

Launchers rebuild a child's command line from overrides (``launchers/base.py``),
a Batch AI node writes its search path (``launchers/batchai/node_entry.py``)
and the launching command gets ``conf/local`` on its search path
(``launchers/user_sources.py``); each quotes a value this way, and the last two
write ``hydra.searchpath`` with ``searchpath_override``.

A hint that prints a command or an override for the user to paste into a shell
(``re-run with hydra.run.dir=...``, ``sbatch <script>``) writes it with
``shell_override`` / ``shell_command``: a path is quoted for Hydra where it
needs it, then the whole word for the shell, so pasting it runs nothing the
path holds (``$(...)``, backticks, ``;``) and Hydra reads the path back unchanged.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePath
from typing import Union

# A path Hydra reads unquoted as the same string (not a number, no interpolation, no grammar characters).
_PLAIN_PATH = re.compile(r"[\w.+@%-]*/[\w./+@%-]*", re.ASCII)


def quote_override_value(value: str, quote: str = "'") -> str:
    """Quote a string for Hydra's override grammar (paths may hold '=', ',', spaces...), in ``'`` (or ``"``).

    In a quoted value Hydra reads a backslash literally unless it precedes a
    quote or ends the string: only those runs are doubled (doubling every
    backslash, as before, turned a run dir ``/a\\b`` into ``/a\\\\b`` on the ranks).
    """
    escaped = re.sub(r"(\\*)" + quote, lambda m: m.group(1) * 2 + "\\" + quote, value)
    escaped = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped)
    return f"{quote}{escaped}{quote}"


def searchpath_override(paths) -> str:
    """``hydra.searchpath=[...]`` of ``paths`` (``file://...``, ``pkg://...``), each quoted."""
    return "hydra.searchpath=[" + ",".join(quote_override_value(str(p)) for p in paths) + "]"


def override_key(override: str) -> str:
    """The key (or group) an override sets: ``+model.width=8`` -> ``model.width``."""
    return override.split("=", 1)[0].lstrip("+~")


def names_group(override: str, group: str) -> bool:
    """Whether ``override`` chooses or changes ``group``: ``data=...``, ``data.path=...``, ``+data.kwargs.n=...``,
    ``hydra/launcher=...``."""
    key = override_key(override)
    return key == group or key.startswith(group + ".") or key.startswith(group + "/")


def shell_override(key: str, value: Union[str, PurePath]) -> str:
    """``key=value`` for a person to paste into a shell: ``value`` quoted for Hydra (in ``"``, which a shell's
    ``'...'`` keeps) unless it is a plain path, then the whole as one shell word."""
    text = str(value)
    word = text if _PLAIN_PATH.fullmatch(text) else quote_override_value(text, quote='"')
    return shlex.quote(f"{key}={word}")


def shell_command(*words: Union[str, PurePath]) -> str:
    """A command line for a person to paste into a shell, each word quoted as a shell needs it."""
    return shlex.join(str(w) for w in words)


def rerun_hint(run_dir: Union[str, PurePath]) -> str:
    """``re-run with hydra.run.dir=<run dir>``: how to resume a run, as the user can paste it."""
    return f"re-run with {shell_override('hydra.run.dir', run_dir)}"
