"""Every private API of Hydra (``hydra._internal``) cifar_dist relies on, in one place.

Hydra has no public way to read a command line, a search path or a config repository before it composes: the
early checks (``config/override_check.py``: misspelt options and keys; ``local_options.py``: ``conf/local``'s
rules; ``config/option_listing.py``: ``--help``'s groups) use its own parser and loader, so that they read the
command line exactly as Hydra will. Each function says which private thing it uses; a Hydra release that removes
or changes one fails the test named after it (tests/common/test_private_apis.py), and the fix is here. Nothing
else in the project imports ``hydra._internal`` (tests/project/test_structure.py). The private modules are
imported inside the functions: were one gone, the check that needs it fails, not every import.

A search path, a loader and a repository are Hydra's objects, passed back in here; callers use only the public
``ConfigSearchPath`` (``prepend``) and ``ConfigLoader`` (``load_configuration``) interfaces on them.
"""

from __future__ import annotations

import argparse
from typing import Any, Iterable, List, Optional, Tuple

from hydra.core.object_type import ObjectType


def args_parser() -> argparse.ArgumentParser:
    """The argument parser of every Hydra app (its flags, then ``overrides``): ``hydra._internal.utils
    .get_args_parser``."""
    from hydra._internal.utils import get_args_parser  # lazy: Hydra's private parser (module docstring)

    return get_args_parser()


def app_search_path(calling_module: str, config_path: Optional[str]) -> Any:
    """The search path ``@hydra.main`` in ``calling_module`` with ``config_path`` starts from:
    ``hydra._internal.utils.create_automatic_config_search_path``."""
    from hydra._internal.utils import create_automatic_config_search_path  # lazy: Hydra's private helper

    return create_automatic_config_search_path(None, calling_module, config_path)


def search_path(sources: Iterable[Tuple[str, str]]) -> Any:
    """A search path of ``(provider, "schema://path")`` sources, in order: ``hydra._internal
    .config_search_path_impl.ConfigSearchPathImpl``."""
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl  # lazy: Hydra's private class

    found = ConfigSearchPathImpl()
    for provider, path in sources:
        found.append(provider, path)
    return found


def config_repository(path: Any) -> Any:
    """The config groups and options of a search path: ``hydra._internal.config_repository.ConfigRepository``."""
    from hydra._internal.config_repository import ConfigRepository  # lazy: Hydra's private class

    return ConfigRepository(path)


def options_of(repository: Any, group: str) -> List[str]:
    """The options of ``group`` in a repository: ``ConfigRepository.get_group_options`` (``ObjectType.CONFIG``)."""
    return list(repository.get_group_options(group, ObjectType.CONFIG))


def subgroups_of(repository: Any, group: str) -> List[str]:
    """The groups directly inside ``group`` ("": the top): ``ConfigRepository.get_group_options``
    (``ObjectType.GROUP``)."""
    return list(repository.get_group_options(group, ObjectType.GROUP))


def has_group(repository: Any, group: str) -> bool:
    """Whether ``group`` is a config group of the repository: ``ConfigRepository.group_exists``."""
    return bool(repository.group_exists(group))


def config_loader(path: Any) -> Any:
    """The loader ``@hydra.main`` composes with, on a search path: ``hydra._internal.config_loader_impl
    .ConfigLoaderImpl`` (its ``load_configuration`` is the public ``ConfigLoader`` interface)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl  # lazy: Hydra's private class

    return ConfigLoaderImpl(config_search_path=path)


def parsed_overrides(loader: Any, config_name: str, overrides: List[str]) -> Tuple[list, Any]:
    """The command line's overrides parsed, and the repository as they leave it (``hydra.searchpath`` overrides
    applied): ``ConfigLoaderImpl._parse_overrides_and_create_caching_repo``."""
    return loader._parse_overrides_and_create_caching_repo(config_name, overrides)


def primary_config(loader: Any, config_name: str) -> Any:
    """The primary config file as loaded, before composition (None where there is none): the loader's
    ``repository.load_config(name).config``."""
    loaded = loader.repository.load_config(config_name)
    return loaded.config if loaded is not None else None


def failure_of(job_return: Any) -> Optional[BaseException]:
    """The exception a failed job of a sweep raised, read without raising it: ``JobReturn._return_value`` (the
    public ``return_value`` property re-raises a failed job's exception, printing Hydra's "Error executing job")."""
    return job_return._return_value
