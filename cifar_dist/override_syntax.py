"""Hydra's override grammar, as cifar_dist writes overrides for another process: the one quoting rule.

Launchers rebuild a child's command line from overrides (``launchers/base.py``),
a Batch AI node writes its search path (``launchers/batchai/node_entry.py``)
and the launching command gets ``conf/local`` on its search path
(``launchers/carry.py``); each quotes a value this way, and the last two
write ``hydra.searchpath`` with ``searchpath_override``.
"""
from __future__ import annotations

import re


def quote_override_value(value: str) -> str:
    """Quote a string for Hydra's override grammar (paths may hold '=', ',', spaces...).

    In a quoted value Hydra reads a backslash literally unless it precedes a
    quote or ends the string: only those runs are doubled (doubling every
    backslash, as before, turned a run dir ``/a\\b`` into ``/a\\\\b`` on the ranks).
    """
    escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
    escaped = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped)
    return f"'{escaped}'"


def searchpath_override(paths) -> str:
    """``hydra.searchpath=[...]`` of ``paths`` (``file://...``, ``pkg://...``), each quoted."""
    return "hydra.searchpath=[" + ",".join(quote_override_value(str(p)) for p in paths) + "]"


def override_key(override: str) -> str:
    """The key (or group) an override sets: ``+model.width=8`` -> ``model.width``."""
    return override.split("=", 1)[0].lstrip("+~")
