"""A user's YAML config files, before Hydra composes them: where they are, and their syntax in one line.

``conf/local/`` (``local_dir``, beside the package's own configs, git-ignored)
holds a user's settings (``default.yaml``, loaded last by the primary config)
and options of their own (``<group>/<name>.yaml``, e.g. ``model/mine.yaml``,
selected as ``model=mine``); ``holds_options`` tells whether it has any.

Hydra reports a YAML error in a config dir (``--config-dir``/``-cd``,
``--config-path``/``-cp``, or ``conf/local/``) with a 30-line traceback from
inside its loader. ``check_user_yaml`` parses a command line's config dirs
first, with the same YAML loader, and names the file, line and column of the
first error (``yaml_error``; ``conf/local``'s rules are in local_options.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, List, Optional, Sequence

import yaml

import cifar_dist.conf
from cifar_dist.common.omegaconf_internals import yaml_loader

DIR_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp")
DEFAULT_CONFIG_NAME = "config"  # the app's primary config (app.py's @hydra.main)
PACKAGE_CONFIGS = "pkg://cifar_dist.conf"  # the app's own config_path (app.py's @hydra.main)


def config_dirs(argv: Sequence[str]) -> List[Path]:
    """The config dirs named on the command line (both ``--flag DIR`` and ``--flag=DIR``)."""
    dirs = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in DIR_FLAGS:
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if value:
                dirs.append(Path(value))
    return dirs


def local_dir() -> Path:
    """``conf/local/`` where the package's configs are (the checkout's ``conf/`` in an editable install)."""
    return Path(cifar_dist.conf.__file__).resolve().parent / "local"


def holds_options(directory: Path) -> bool:
    """True when ``directory`` has a group folder with a YAML option in it (``model/mine.yaml``)."""
    return directory.is_dir() and any(
        next(group.glob("*.yaml"), None) for group in directory.iterdir() if group.is_dir()
    )


def _yaml_files(directory: Path) -> Iterator[Path]:
    if directory.is_dir():
        yield from sorted(p for p in directory.rglob("*.yaml") if p.is_file())


def yaml_error(path: Path) -> Optional[str]:
    """``<file>, line L, column C: <problem>; fix the YAML`` for a file that does not parse, else None."""
    try:
        yaml.load(path.read_text("utf-8"), Loader=yaml_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"{path}{where}: {problem} (YAML syntax); fix that file"
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read config file {path} ({exc}); fix or remove it"
    return None


def check_user_yaml(argv: Sequence[str]) -> Optional[str]:
    """The first YAML error in the config dirs the command line names, or None (``conf/local``'s files are
    checked by the rules of local_options.py: only those the command uses)."""
    for directory in config_dirs(argv):
        for path in _yaml_files(directory):
            error = yaml_error(path)
            if error:
                return error
    return None
