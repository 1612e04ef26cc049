"""What the launching machine composed from, carried to every rank and cluster job: the one rule.

A job composed with ``--config-dir``/``-cd``, ``--config-path``/``-cp``,
``--config-name``/``-cn``, ``hydra.searchpath=[...]`` and a user's own
``_target_`` (``model._target_=mymodels.build``, ``data._target_=mydata.make``)
must run the same everywhere. ``Carried.from_hydra`` reads them once, from
Hydra's own record of the launch (``hc.runtime.config_sources``,
``hc.job.config_name``) and from the composed config's ``_target_`` values;
then

* ranks on this machine or a shared file system (mpirun, Gloo, Slurm; every
  sweep point) get the same flags with absolute paths (``hydra_args``, used
  by ``JobSpec.child_command``) and the user's module roots first on
  ``PYTHONPATH`` (``code_roots``, put there by ``rank_env.rank_environment``);
* jobs that run from a copy of the code (Azure ML's snapshot, Batch AI's
  share) get the user's files copied in (``shipped_files``): module files or
  packages under ``user/code/``, config dirs under ``user/conf/<n>/``, and
  their command points at those copies (``Shipped``).

Hydra's own ``hydra.searchpath`` override reaches local ranks unchanged
(``JobSpec.child_overrides``); a snapshot job gets it rewritten to the copies.
What cannot be carried into a snapshot (a namespace package, a config dir of
more than ``MAX_SHIPPED_BYTES``, ``--config-path``, which replaces the
package's own configs) is refused in one line that says what to do.
Modules installed into the environment (site-packages, the standard library,
cifar_dist itself) are not user code: they are not carried.
"""

from __future__ import annotations

import importlib.util
import os
import site
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.errors import CifarDistError
from cifar_dist.config.files import DEFAULT_CONFIG_NAME, PACKAGE_CONFIGS
from cifar_dist.config.override_syntax import override_key, searchpath_override

SHIPPED_ROOT = "user"  # in a snapshot: user/code/<module>, user/conf/<n>/
MAX_SHIPPED_BYTES = 20 * 1024 * 1024  # a config dir or module package bigger than this is not copied into a job
_SKIP_DIRS = {"__pycache__", ".git", ".hydra", ".pytest_cache", "outputs", "multirun"}
_RESERVED = {"cifar_dist", "hydra_plugins", SHIPPED_ROOT}


class CarryError(CifarDistError, RuntimeError):
    """Something the launch composed from that a job cannot take along; one line saying what to do."""


@dataclass(frozen=True)
class UserModule:
    """A ``_target_``'s top-level module that is the user's own: a file or a package under ``root``."""

    key: str  # where it was named: model._target_
    name: str  # the top-level module: mymodels
    root: str  # the directory that holds it (a sys.path entry)
    path: str  # mymodels.py, or the package dir mypkg/ (absolute)
    namespace_dirs: Tuple[str, ...] = ()  # a namespace package's parts (several dirs, no __init__.py)


@dataclass(frozen=True)
class Carried:
    """The launch's own config sources and user modules (empty: a plain ``python -m cifar_dist``)."""

    config_path: Optional[str] = None  # --config-path, when it replaced the package's configs
    config_dir: Optional[str] = None  # --config-dir, absolute
    config_name: str = DEFAULT_CONFIG_NAME
    search_dirs: Tuple[str, ...] = ()  # hydra.searchpath's file:// dirs, absolute
    modules: Tuple[UserModule, ...] = ()

    @classmethod
    def from_hydra(cls, hc: Any, cfg: Any) -> Carried:
        """From a HydraConfig (its runtime.config_sources and job.config_name) and the composed config."""
        config_path = config_dir = None
        search_dirs: List[str] = []
        for source in hc.runtime.config_sources:
            where = f"{source.schema}://{source.path}"
            if source.provider == "main" and where != PACKAGE_CONFIGS:
                config_path = source.path if source.schema == "file" else where
            elif source.provider == "command-line" and source.schema == "file":
                config_dir = source.path
            elif str(source.provider).startswith("hydra.searchpath") and source.schema == "file":
                search_dirs.append(source.path)
        return cls(
            config_path,
            config_dir,
            str(hc.job.config_name or DEFAULT_CONFIG_NAME),
            tuple(search_dirs),
            tuple(user_modules(cfg)),
        )

    # ---- ranks that see this machine's files (mpirun, Gloo, Slurm) --------------------------------
    def hydra_args(self) -> List[str]:
        """``--config-path``/``--config-dir``/``--config-name`` as given to the launch (absolute paths)."""
        args: List[str] = []
        if self.config_path:
            args += ["--config-path", self.config_path]
        if self.config_dir:
            args += ["--config-dir", self.config_dir]
        if self.config_name != DEFAULT_CONFIG_NAME:
            args += ["--config-name", self.config_name]
        return args

    def code_roots(self) -> List[str]:
        """The sys.path entries that hold the user's modules, for the ranks' PYTHONPATH."""
        roots = [str(Path(d).parent) for m in self.modules for d in m.namespace_dirs]
        return list(dict.fromkeys([m.root for m in self.modules] + roots))

    # ---- jobs that run from a copy of the code (Azure ML, Batch AI) -------------------------------
    def shipped(self, launcher: str) -> Shipped:
        """Where the user's files go in a snapshot, checked; refused in one line when they cannot go."""
        if self.config_path:
            raise CarryError(
                f"launcher={launcher} cannot carry --config-path {self.config_path} (it replaces "
                "cifar_dist's own configs on the nodes); put your configs in a dir given as --config-dir"
            )
        files: Dict[str, Path] = {}
        conf_dirs: List[str] = []
        for n, directory in enumerate(([self.config_dir] if self.config_dir else []) + list(self.search_dirs)):
            rel = f"{SHIPPED_ROOT}/conf/{n}"
            files.update(_tree(Path(directory), rel, f"config dir {directory}", launcher))
            conf_dirs.append(rel)
        for module in self.modules:
            files.update(_module_files(module, launcher))
        return Shipped(
            files=files,
            config_dir=conf_dirs[0] if self.config_dir else None,
            search_dirs=tuple(conf_dirs[1:] if self.config_dir else conf_dirs),
            config_name=self.config_name,
            has_code=bool(self.modules),
        )


@dataclass(frozen=True)
class Shipped:
    """The user's files as a snapshot holds them, paths relative to the snapshot's root."""

    files: Dict[str, Path] = field(default_factory=dict)  # snapshot path -> local file
    config_dir: Optional[str] = None
    search_dirs: Tuple[str, ...] = ()
    config_name: str = DEFAULT_CONFIG_NAME
    has_code: bool = False

    @property
    def code_dir(self) -> Optional[str]:
        return f"{SHIPPED_ROOT}/code" if self.has_code else None

    def hydra_args(self, prefix: str = "") -> List[str]:
        """The launch's config flags pointing at the copies (``prefix``: where the snapshot is on the node)."""
        args = ["--config-dir", prefix + self.config_dir] if self.config_dir else []
        return args + (["--config-name", self.config_name] if self.config_name != DEFAULT_CONFIG_NAME else [])

    def searchpath_override(self, prefix: str = "") -> Optional[str]:
        """``hydra.searchpath=[file://...]`` of the copies, replacing the launch's own (None: it had none)."""
        if not self.search_dirs:
            return None
        return "hydra.searchpath=[" + ",".join(f"file://{prefix}{d}" for d in self.search_dirs) + "]"


def _names_searchpath(override: str) -> bool:
    return override_key(override) == "hydra.searchpath"


def with_searchpath(overrides: Sequence[str], directory: Path, inherited: Sequence[str] = ()) -> List[str]:
    """``overrides`` with ``file://<directory>`` last on ``hydra.searchpath``: added to their own
    ``hydra.searchpath=[...]`` or, without one, to ``inherited`` (the primary config's, which a value on the
    command line replaces). Unchanged when it is there already or the value does not parse (Hydra says why)."""

    overrides = list(overrides)
    at = next((i for i, o in enumerate(overrides) if _names_searchpath(o)), None)
    paths = list(inherited)
    if at is not None:
        try:
            paths = OverridesParser.create().parse_override(overrides[at]).value()
        except HydraException:
            return overrides
        if not isinstance(paths, list):
            return overrides
    uri = f"file://{directory}"
    if uri in paths:
        return overrides
    override = searchpath_override([*paths, uri])
    if at is None:
        return overrides + [override]
    overrides[at] = override
    return overrides


def without_searchpath(overrides: List[str]) -> List[str]:
    """The overrides minus ``hydra.searchpath`` (a snapshot job gets its own, pointing at the copies)."""
    return [o for o in overrides if not _names_searchpath(o)]


# ---- finding the user's modules ----------------------------------------------------------------
def _targets(node: Any, key: str = "") -> Iterator[Tuple[str, str]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            where = f"{key}.{k}" if key else str(k)
            if k == "_target_" and isinstance(v, str) and "${" not in v:
                yield where, v
            else:
                yield from _targets(v, where)
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from _targets(v, f"{key}[{i}]")


def _installed_dirs() -> List[Path]:
    paths = sysconfig.get_paths()
    dirs = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")] + list(site.getsitepackages())
    dirs.append(getattr(site, "getusersitepackages", lambda: None)())
    return [Path(d).resolve() for d in dirs if d]


def _is_installed(path: Path) -> bool:
    return any(path == d or d in path.parents for d in _installed_dirs())


def user_modules(cfg: Any) -> List[UserModule]:
    """The top-level modules of the config's ``_target_`` values that are the user's own files
    (found on this sys.path, not installed, not cifar_dist); nothing is imported or executed."""

    container = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    found: Dict[str, UserModule] = {}
    for key, target in _targets(container or {}):
        name = target.split(".", 1)[0]
        if name in found or name in sys.builtin_module_names or name in ("cifar_dist", "hydra_plugins"):
            continue
        module = _user_module(key, name)
        if module is not None:
            found[name] = module
    return list(found.values())


def _user_module(key: str, name: str) -> Optional[UserModule]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None  # not importable here: the ranks report it as a local run would
    if spec.submodule_search_locations is not None:
        locations = [str(Path(p).resolve()) for p in spec.submodule_search_locations]
        if not locations or any(_is_installed(Path(p)) for p in locations):
            return None
        path = Path(locations[0])
        if spec.origin is None or len(locations) != 1:  # a namespace package
            return UserModule(key, name, str(path.parent), str(path), namespace_dirs=tuple(locations))
    elif spec.origin and spec.has_location:
        path = Path(spec.origin).resolve()
    else:
        return None  # frozen or built in
    if _is_installed(path):
        return None
    return UserModule(key=key, name=name, root=str(path.parent), path=str(path))


# ---- copying into a snapshot -------------------------------------------------------------------
def _tree(directory: Path, rel: str, what: str, launcher: str) -> Dict[str, Path]:
    """Every file under ``directory`` as ``rel/...`` (caches and run outputs skipped), size-checked."""
    if not directory.is_dir():
        raise CarryError(f"{what} does not exist here, so launcher={launcher} cannot carry it; fix the path")
    files: Dict[str, Path] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.suffix in (".pyc", ".pyo") or not path.is_file():
                continue
            total += path.stat().st_size
            if total > MAX_SHIPPED_BYTES:
                raise CarryError(
                    f"{what} holds more than {MAX_SHIPPED_BYTES // (1024 * 1024)} MB, too much for "
                    f"launcher={launcher} to copy into the job; keep only configs and code there"
                )
            files[f"{rel}/{path.relative_to(directory).as_posix()}"] = path
    return files


def _module_files(module: UserModule, launcher: str) -> Dict[str, Path]:
    if module.namespace_dirs:
        raise CarryError(
            f"{module.key}: {module.name} is a namespace package ({', '.join(module.namespace_dirs)}), "
            f"which launcher={launcher} cannot copy as one; add an __init__.py to {module.path}"
        )
    if module.name in _RESERVED:
        raise CarryError(
            f"{module.key}: a module named {module.name} would shadow launcher={launcher}'s own "
            "files on the nodes; rename it"
        )
    path = Path(module.path)
    rel = f"{SHIPPED_ROOT}/code/{path.name}"
    if path.is_dir():
        return _tree(path, rel, f"package {path} ({module.key})", launcher)
    if path.suffix != ".py":
        raise CarryError(
            f"{module.key}: {path} is not a Python source file, which launcher={launcher} cannot "
            "carry to other machines; install it into the job's environment instead"
        )
    return {rel: path}
