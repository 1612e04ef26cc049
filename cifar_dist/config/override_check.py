"""Refuse a command line whose overrides name no option or no key, before Hydra composes.

Hydra's own errors for ``launcher=mpiru`` or ``trainer.epocs=3`` are several
lines (a list of every option, a hint to write ``+trainer.epocs=3``), and
``+trainer.epocs=3`` itself is accepted: the key is added beside ``epochs``
and ignored. This check runs first in ``app.main``, before Hydra creates a
run dir, writes ``.hydra/`` or loads any data, and turns each into one line
with the nearest known name::

    cifar_dist: error: launcher=mpiru: launcher has no option `mpiru`; did you mean `mpirun`? ...
    cifar_dist: error: +trainer.epocs=3: trainer has no key `epocs`; did you mean `epochs`? ...

A key is checked where its node is typed (a dataclass: every built-in
option, ``config_options``), with or without ``+``/``++``; an untyped node
(a user's own ``model/<name>.yaml``, a ``Dict`` field such as
``launcher.env``) takes any key here. The check composes the config with the
command line's group choices (as Hydra will), so the typed nodes are those
of the options chosen. Anything it cannot judge is left to Hydra, which
composes again and reports as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
from typing import List, Optional, Sequence

from hydra.core.config_search_path import SearchPathQuery
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cifar_dist.common.errors import did_you_mean
from cifar_dist.common.hydra_internals import (
    app_search_path,
    args_parser,
    config_loader,
    has_group,
    options_of,
    parsed_overrides,
    primary_config,
)
from cifar_dist.config.hydra_compat import let_hydra_parse_on_python_314
from cifar_dist.models.builder import builder_problem

SEE_KEYS = "python -m cifar_dist --cfg job [group=option] lists every key"
SEE_OPTIONS = "python -m cifar_dist --help lists every option"


def typed_keys(node: object) -> Optional[List[str]]:
    """The keys a config node may hold: its dataclass's fields; None when it is untyped."""
    if not isinstance(node, DictConfig):
        return None
    node_type = OmegaConf.get_type(node)
    if node_type is None or not dataclasses.is_dataclass(node_type):
        return None
    return [f.name for f in dataclasses.fields(node_type)]


def unknown_key(cfg: DictConfig, key: str) -> Optional[str]:
    """Why ``key`` (dotted) names nothing in ``cfg``, when a typed node on its path lacks it."""
    node: object = cfg
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            return None  # a list, a value, None: Hydra judges
        if part not in node.keys():
            known = typed_keys(node)
            if known is None:
                return None
            where = ".".join(parts[:depth]) or "the config"
            return f"{where} has no key `{part}`{did_you_mean(part, known)} ({SEE_KEYS})"
        if depth + 1 < len(parts):
            if OmegaConf.is_missing(node, part) or OmegaConf.is_interpolation(node, part):
                return None
            node = node[part]
    return None


def option_problem(group: str, values: Sequence[Optional[str]], options: Sequence[str]) -> Optional[str]:
    """Why a value of ``group=...`` names no option of the group (``null`` deselects: allowed)."""
    for value in values:
        if value is not None and value != "null" and value not in options:
            return (
                f"{group} has no option `{value}`{did_you_mean(value, options)} (options: {', '.join(sorted(options))})"
            )
    return None


def override_values(override) -> List[Optional[str]]:
    """The values an override gives its key or group (each of a sweep's; [] for a delete)."""
    if override.is_delete():
        return []
    if override.is_sweep_override():
        try:
            return list(override.sweep_string_iterator())
        except Exception:  # interval/range sweeps of a sweeper plugin: nothing to compare
            return []
    return [override.get_value_element_as_str()] if override.value() is not None else [None]


def _loader(args):
    search_path = app_search_path("cifar_dist.app", args.config_path or "conf")
    if args.config_dir is not None:
        config_dir = os.path.abspath(args.config_dir)
        if not os.path.isdir(config_dir):
            return None  # Hydra says so itself
        search_path.prepend(
            provider="command-line", path=f"file://{config_dir}", anchor=SearchPathQuery(provider="schema")
        )
    return config_loader(search_path)


def overrides_problem(loader, config_name: str, overrides: List[str]) -> Optional[str]:
    """The first override that names no option or no key, as ``<override>: <why>``."""
    parsed, repo = parsed_overrides(loader, config_name, overrides)
    groups = [o for o in parsed if not o.is_hydra_override() and has_group(repo, o.key_or_group)]
    for o in groups:
        problem = option_problem(o.key_or_group, override_values(o), options_of(repo, o.key_or_group))
        if problem:
            return f"{o.input_line}: {problem}"
    swept = {o.key_or_group for o in groups if o.is_sweep_override()}
    shape = [o.input_line for o in parsed if not o.is_sweep_override() and (o in groups or o.is_hydra_override())]
    cfg = loader.load_configuration(config_name, shape, RunMode.RUN, validate_sweep_overrides=False)
    for o in parsed:
        if o in groups or o.is_hydra_override() or o.is_delete() or o.key_or_group.split(".")[0] in swept:
            continue
        problem = unknown_key(cfg, o.key_or_group)
        if problem:
            return f"{o.input_line}: {problem}"
    return None if "model" in swept else model_arguments_problem(cfg, parsed)


def _model_choice(cfg: DictConfig) -> str:
    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None) or {}
    return f"model/{choices['model']}" if choices.get("model") else "the model's config"


def model_arguments_problem(cfg: DictConfig, parsed) -> Optional[str]:
    """The first ``model`` key (of its config or of an override) that the builder named by ``_target_``
    does not take, checked against the builder's declared parameters (models/builder.py; nothing is imported)."""
    model = cfg.get("model")
    if not isinstance(model, DictConfig):
        return None
    keys = {key: None for key in model.keys()}  # key -> the override that set it (None: the model's config)
    for o in parsed:
        parts = o.key_or_group.split(".")
        if parts[0] != "model" or len(parts) != 2 or o.is_hydra_override() or o.is_sweep_override():
            continue
        if o.is_delete():
            keys.pop(parts[1], None)
        else:
            keys[parts[1]] = o
    target_override = keys.get("_target_")
    target = target_override.value() if target_override is not None else model.get("_target_")
    if "_target_" not in keys or not isinstance(target, str) or "${" in target:
        return None
    where = target_override.input_line if target_override is not None else f"model._target_ ({_model_choice(cfg)})"
    found = builder_problem(target, list(keys))
    if found is None:
        return None
    key, why = found
    if key == "_target_":
        return f"{where}: {why}"
    o = keys[key]
    return f"{o.input_line if o is not None else f'model.{key} ({_model_choice(cfg)})'}: {why}"


def parsed_command_line(argv: Sequence[str]):
    """``argv`` read by Hydra's own argument parser (its flags, then ``.overrides``); None when Hydra's
    parser refuses it (it says why when Hydra parses it again, so nothing is printed here)."""
    let_hydra_parse_on_python_314()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return args_parser().parse_args(list(argv))
    except SystemExit:
        return None


def replace_overrides(argv: Sequence[str], given: Sequence[str], new: Sequence[str]) -> Optional[List[str]]:
    """``argv`` with its overrides ``given`` (one run of words, as argparse reads them) replaced by ``new``
    where they stand; None when they are not one run (then Hydra reads ``argv`` as given)."""
    argv, given = list(argv), list(given)
    at = next((i for i in range(len(argv) - len(given) + 1) if argv[i : i + len(given)] == given), None)
    return None if at is None else argv[:at] + list(new) + argv[at + len(given) :]


def primary_searchpath(args) -> List[str]:
    """``hydra.searchpath`` as the primary config of a parsed command line sets it (a user's
    ``--config-name`` may; cifar_dist's own does not): [] when it sets none or cannot be read (Hydra says why)."""
    loader = _loader(args)
    if loader is None:
        return []
    try:
        loaded = primary_config(loader, args.config_name or "config")
    except (HydraException, OmegaConfBaseException, ValueError):
        return []
    value = OmegaConf.select(loaded, "hydra.searchpath", default=None) if loaded is not None else None
    return [str(v) for v in value] if OmegaConf.is_list(value) else []


def command_line_problem(argv: Sequence[str]) -> Optional[str]:
    """One line naming the first misspelt option or key of ``python -m cifar_dist <argv>``, or None.

    Parses ``argv`` with Hydra's own argument parser and search path, so that
    ``--config-dir``, ``--config-name`` and ``hydra.searchpath`` count as for Hydra."""
    args = parsed_command_line(argv)
    if args is None or args.shell_completion or not args.overrides:
        return None
    loader = _loader(args)
    if loader is None:
        return None
    try:
        return overrides_problem(loader, args.config_name or "config", list(args.overrides))
    except (HydraException, OmegaConfBaseException, ValueError):
        return None  # not a name this check knows (Hydra's own ValueErrors included): Hydra reports it
