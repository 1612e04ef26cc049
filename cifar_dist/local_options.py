"""The rules for ``conf/local/``, checked before Hydra composes anything (``__main__``).

``conf/local/<group>/<name>.yaml`` is an option of the user's own (``model=mine``):

- it may not have the name of one of cifar_dist's own options of that group
  (``conf/local/model/seed_cnn.yaml``): Hydra would merge it into the built-in
  one, silently changing every run that uses it (every default run, for
  ``seed_cnn``), or, with a key the built-in lacks, break every command,
  ``--help`` included. It is refused in one line saying to rename it;
- one that does not parse (a YAML error) matters only to a command that
  selects it (``model=mine``, a sweep over it): that command is refused in one
  line naming the file, line and column; any other command runs, with a
  one-line warning. ``conf/local/default.yaml`` is loaded by every command: an
  error in it is always refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Set, Tuple

from hydra.core.override_parser.overrides_parser import OverridesParser

from cifar_dist.common.hydra_internals import config_repository, options_of, search_path
from cifar_dist.config.files import yaml_error
from cifar_dist.config.override_check import override_values, parsed_command_line

DEFAULT = "default.yaml"  # conf/local/default.yaml: loaded last by the primary config, by every command


def local_option_files(local: Path) -> Iterator[Tuple[str, str, Path]]:
    """(group, name, file) of every option in ``local`` (``model/mine.yaml`` -> ("model", "mine", ...))."""
    if not local.is_dir():
        return
    for path in sorted(local.rglob("*.yaml")):
        relative = path.relative_to(local)
        if path.is_file() and len(relative.parts) > 1:
            yield "/".join(relative.parts[:-1]), path.stem, path


def builtin_options(group: str) -> List[str]:
    """cifar_dist's own options of ``group`` (its dataclasses and the package's YAML presets), not conf/local's."""
    # lazy: every launcher's and plugin's module, only when conf/local holds options
    from cifar_dist.all_options import register_configs

    register_configs()
    # the package's configs (their local/ folder is a group of its own here) and the dataclasses, not conf/local
    sources = [("main", "pkg://cifar_dist.conf"), ("schema", "structured://")]
    return options_of(config_repository(search_path(sources)), group)


def shadowing_problem(local: Path) -> Optional[str]:
    """One line for the first ``conf/local`` option named like a built-in option of its group, else None."""
    for group, name, path in local_option_files(local):
        if name in builtin_options(group):
            return (
                f"{path} has the name of cifar_dist's own option {group}={name}, which it would silently change "
                f"(or break for every command); rename it, e.g. to {path.with_name('my_' + path.name)}, and "
                f"select it as {group}=my_{name} (a `defaults: [{name}, _self_]` list in it keeps the "
                "built-in's values)"
            )
    return None


def chosen_options(argv: Sequence[str]) -> Set[Tuple[str, str]]:
    """(group, option) of every ``group=option`` the command line selects (each value of a sweep)."""
    args = parsed_command_line(argv)
    try:
        overrides = OverridesParser.create().parse_overrides(list(args.overrides)) if args is not None else []
    except Exception:  # noqa: BLE001 -- Hydra reports a malformed override itself
        return set()
    return {(o.key_or_group, str(v)) for o in overrides for v in override_values(o) if v is not None}


def yaml_problems(argv: Sequence[str], local: Path) -> Tuple[Optional[str], List[str]]:
    """(the error of a broken file this command uses, or None; a warning for each broken file it does not)."""
    candidates = [(None, None, local / DEFAULT)] + list(local_option_files(local))
    warnings = []
    for group, name, path in candidates:
        error = yaml_error(path) if path.is_file() else None
        if error is None:
            continue
        if group is None or (group, name) in chosen_options(argv):  # parsed only for a broken file
            return error, warnings
        warnings.append(f"{error}; ignored until then (this command does not use {group}={name})")
    return None, warnings


def local_problems(argv: Sequence[str], local: Path) -> Tuple[Optional[str], List[str]]:
    """(one line refusing the command, or None; one-line warnings) for ``conf/local`` under these rules."""
    error, warnings = yaml_problems(argv, local)
    return error or shadowing_problem(local), warnings
