"""A user's YAML config files read before Hydra composes them: a syntax error is one line, not a traceback.

Hydra reports a YAML error in a config dir (``--config-dir``/``-cd``,
``--config-path``/``-cp``, or ``conf/local/``) with a 30-line traceback from
inside its loader. ``check_user_yaml`` parses those files first, with the
same YAML loader, and names the file, line and column of the first error.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, List, Optional, Sequence

DIR_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp")


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


def _yaml_files(directory: Path) -> Iterator[Path]:
    if directory.is_dir():
        yield from sorted(p for p in directory.rglob("*.yaml") if p.is_file())


def yaml_error(path: Path) -> Optional[str]:
    """``<file>, line L, column C: <problem>; fix the YAML`` for a file that does not parse, else None."""
    import yaml
    from omegaconf._utils import get_yaml_loader

    try:
        yaml.load(path.read_text("utf-8"), Loader=get_yaml_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"{path}{where}: {problem} (YAML syntax); fix that file"
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read config file {path} ({exc}); fix or remove it"
    return None


def check_user_yaml(argv: Sequence[str], local_dir: Path) -> Optional[str]:
    """The first YAML error in the user's config dirs (and ``conf/local``), or None."""
    for directory in [*config_dirs(argv), local_dir]:
        for path in _yaml_files(directory):
            error = yaml_error(path)
            if error:
                return error
    return None
