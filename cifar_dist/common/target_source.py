"""A ``_target_``'s module as ``import`` would find it, read without running it; and why importing it failed.

The launching process checks a user's model builder (``models/builder.py``) and data factory
(``data/custom.py``) before anything is written, but runs none of their code (nor TensorFlow, which must load
only after the engine's start chose its kernels): it finds the module's source on ``sys.path``, parses it and
reads what its top level binds. Where the module is imported (on every rank), a failure is told in one line
that names where in the user's code it happened (``import_failure``), not only that the module "cannot be
imported".
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import List, Optional, Tuple


class NoModule(Exception):
    """No module of that name on ``sys.path``; ``name`` is the first part of the dotted name that is missing."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def module_source(module: str) -> Optional[Path]:
    """The source file of ``module``, found on sys.path as ``import`` would, without running any of it; None for a
    compiled or namespace module. Raises ``NoModule``."""
    search: Optional[List[str]] = None
    spec = None
    parts = module.split(".")
    for depth in range(len(parts)):
        name = ".".join(parts[: depth + 1])
        if name in sys.modules and depth + 1 < len(parts):
            search = list(getattr(sys.modules[name], "__path__", []) or [])
            continue
        spec = importlib.machinery.PathFinder.find_spec(name, search)
        if spec is None:
            raise NoModule(name)
        search = list(spec.submodule_search_locations or [])
    origin = getattr(spec, "origin", None) if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def binds(node: ast.AST, attr: str) -> bool:
    """Whether a top-level statement binds ``attr`` some other way than a plain def (an import, an assignment...)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == attr and isinstance(sub.ctx, ast.Store):
            return True
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and sub.name == attr:
            return True
        if isinstance(sub, ast.alias) and (sub.name == "*" or (sub.asname or sub.name.split(".")[0]) == attr):
            return True
    return False


def declared_in(tree: ast.Module, attr: str):
    """The top-level def/class that binds ``attr`` last; "bound" when something else does; None when nothing does."""
    found = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == attr:
            found = node
        elif binds(node, attr):
            found = "bound"  # an import, an assignment, a conditional def: only running the module would tell
    return found


def defined_names(tree: ast.Module) -> List[str]:
    """The functions and classes a module's top level defines (for a "did you mean")."""
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def missing_import(tree: ast.Module) -> Optional[Tuple[int, str]]:
    """(line, name) of the first import at a module's top level, outside ``try``/``if``, of a package that is not
    installed here; None when there is none, or when the module changes ``sys.path`` (it may add the package)."""
    if any(
        isinstance(n, ast.Attribute) and n.attr == "path" and getattr(n.value, "id", "") == "sys"
        for n in ast.walk(tree)
    ):
        return None
    for node in tree.body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            first = name.split(".")[0]
            if sys.modules.get(first) is None and not _installed(first):
                return node.lineno, first
    return None


def _installed(name: str) -> bool:
    """Whether the top-level module ``name`` can be found (``sys.modules`` marking it None: it cannot)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return True  # a finder that cannot say: importing it will


def import_failure(module: str, exc: BaseException) -> str:
    """Why importing ``module`` failed, in one phrase naming where: ``importing badimp fails at badimp.py:2:
    ModuleNotFoundError: No module named 'x'`` (a syntax error: its file and line; another error: the deepest
    line of Python code it came from, past importlib's own frames)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{exc.filename}:{exc.lineno}"
        detail = exc.msg
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    said = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return f"importing {module} fails at {where}: {said}" if where else f"importing {module} fails: {said}"
