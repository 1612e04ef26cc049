"""A run dir is data, not code: the code its saved config names runs only when the user trusts it, never from
inside the run dir.

A run dir's ``.hydra/`` names code by ``_target_`` (a data factory, a model builder, an optimizer, a Hydra
callback), and a name is imported from ``sys.path``, where ``python -m`` puts the current folder. So a run dir
someone sent can name a module that came with it: ``data._target_: sent_run.payload.make`` beside a
``payload.py``, evaluated from the folder that holds ``sent_run/``, ran their code. What cifar_dist takes from
a saved config is checked here before anything imports it, found on ``sys.path`` as ``import`` would find it
without running any of it (``import_files``):

* ``refuse_inside``: trusted or not, a module whose file (or a package on its way) lies inside the run dir is
  never imported; the one line says to move it out;
* ``refuse_untrusted``: without the user's trust, one line naming each ``_target_``, the module that would run
  and its file; nothing is imported.

The callers: ``task=evaluate`` takes the run's ``data`` (``evaluation/run_data.py``; trusted with
``evaluate.trust_run_code=true``); the re-run from ``--config-path <run>/.hydra`` takes the run's recorded
overrides (``saved_run.py``; trusted by giving such an override on the command line: the command's own
overrides win, and a recorded one that grants trust, ``TRUST_SETTINGS``, is refused like code). A resume
composes the command's own config and reads the saved one only to compare settings (``resume_policy.py``);
it refuses a ``_target_`` of the command's that lies inside the run dir it resumes.
"""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from cifar_dist.common.errors import CifarDistError
from cifar_dist.config.override_syntax import shell_command

TARGET = "_target_"
# Settings that let a model file's or a run's code run: only the user's own command line gives them.
TRUST_SETTINGS = ("evaluate.trust_model", "evaluate.trust_run_code")
SEARCHPATH = "hydra.searchpath"


class RunCodeRefused(CifarDistError):
    """Code that a run dir names would run without the user's trust, or from inside the run dir."""


def targets(node: Any, prefix: str = "") -> Dict[str, str]:
    """Every ``_target_`` in a config node (OmegaConf or plain), by dotted key: ``{"data._target_": "m.make"}``."""
    plain = OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node
    found: Dict[str, str] = {}
    items = plain.items() if isinstance(plain, dict) else enumerate(plain) if isinstance(plain, list) else ()
    for key, value in items:
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key == TARGET and isinstance(value, str):
            found[dotted] = value
        else:
            found.update(targets(value, dotted))
    return found


def module_of(target: str) -> str:
    """The module a ``_target_`` is imported from: ``pkg.mod.make`` -> ``pkg.mod``."""
    return target.rpartition(".")[0] or target


def import_files(module: str) -> List[Path]:
    """The files and package folders that importing ``module`` would run or search, package by package, found as
    ``import`` finds them (an imported package by its ``__path__``, any other on ``sys.path``), without running any."""
    found: List[Path] = []
    locations: Optional[List[str]] = None
    parts = module.split(".")
    for depth, part in enumerate(parts):
        loaded = sys.modules.get(".".join(parts[: depth + 1]))
        spec = getattr(loaded, "__spec__", None) if loaded is not None else _find_spec(part, locations)
        if spec is None:
            break
        if spec.origin and spec.has_location:
            found.append(Path(spec.origin))
        locations = list(spec.submodule_search_locations or [])
        found += [Path(p) for p in locations]
        if not locations:
            break  # a module, not a package: nothing below it
    return found


def _find_spec(name: str, locations: Optional[List[str]]):
    try:
        return importlib.machinery.PathFinder.find_spec(name, locations)
    except (ImportError, ValueError, OSError):
        return None


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def describe(key: str, target: str) -> str:
    """``data._target_=pkg.mod.make (module pkg.mod, /where/pkg/mod.py)``: what would run, and from where."""
    files = [f for f in import_files(module_of(target)) if f.is_file()]
    where = str(files[-1]) if files else "not found on sys.path"
    return f"{key}={target} (module {module_of(target)}, {where})"


def refuse_inside(named: Dict[str, str], run_dir: Path, source: str) -> None:
    """Refuse the ``_target_``s among ``named`` whose module (or a package on its way) lies inside ``run_dir``."""
    inside = [describe(k, t) for k, t in named.items() if any(_inside(f, run_dir) for f in import_files(module_of(t)))]
    if inside:
        raise RunCodeRefused(
            f"{'; '.join(inside)}, named by {source}, lies inside the run dir {run_dir}: a run dir is data, not code, "
            "and nothing is imported from it; move that module out of it (onto PYTHONPATH) if you trust it"
        )


def refuse_untrusted(named: Dict[str, str], run_dir: Path, source: str, how_to_trust: str) -> None:
    """Refuse what ``named`` would import (``refuse_inside`` first: trusting that would not help); one line."""
    refuse_inside(named, run_dir, source)
    if named:
        raise RunCodeRefused(
            f"{source} names code that would run here: {'; '.join(describe(k, t) for k, t in named.items())}; "
            f"refusing to import it. {how_to_trust}"
        )


def _parsed(override: str):
    try:
        return OverridesParser.create().parse_override(override)
    except Exception:  # noqa: BLE001 -- Hydra says what is wrong when it parses the command line itself
        return None


def _searchpath_inside(value: Any, run_dir: Path) -> bool:
    """Whether a ``hydra.searchpath`` value holds a ``file://`` folder inside ``run_dir`` (relative: to the cwd)."""
    entries = value if isinstance(value, list) else [value]
    return any(
        isinstance(e, str) and e.startswith("file://") and _inside(Path(e[len("file://") :]).expanduser(), run_dir)
        for e in entries
    )


def recorded_code(overrides: Iterable[str], run_dir: Path) -> List[str]:
    """The overrides among ``overrides`` (a run's recorded ones) that name code (a ``_target_``, in a key or a
    value), grant trust (``TRUST_SETTINGS``) or read configs from inside ``run_dir`` (``hydra.searchpath``)."""
    found = []
    for override in overrides:
        parsed = _parsed(override)
        if parsed is None or parsed.is_delete():
            continue
        key, value = parsed.key_or_group, parsed.value()
        if (
            (key in TRUST_SETTINGS and value is not False)
            or key.rpartition(".")[2] == TARGET
            or targets(value, key)
            or (key == SEARCHPATH and _searchpath_inside(value, run_dir))
        ):
            found.append(override)
    return found


def refuse_recorded_code(overrides: Sequence[str], run_dir: Path, source: Path) -> None:
    """Refuse re-running ``run_dir``'s recorded ``overrides`` (read from ``source``) that name code or grant trust,
    in one line that lists them as the user may paste them once they trust that code."""
    code = recorded_code(overrides, run_dir)
    if code:
        raise RunCodeRefused(
            f"{source} names code or trust that re-running it would take from the run dir: "
            f"{shell_command(*code)}; give these overrides on your own command line only if you trust whoever "
            f"made {run_dir} (a run's recorded overrides never import code or grant trust by themselves)"
        )
