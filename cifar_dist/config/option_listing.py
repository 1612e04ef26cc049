"""The config groups and options ``python -m cifar_dist --help`` lists: those of every source the command composed from.

Hydra's own ``$APP_CONFIG_GROUPS`` reads only the config sources Hydra starts
with, so an option found through ``hydra.searchpath`` (a user's dir, or the
``conf/local`` folder the launching command puts there, ``app.with_local_options``)
is missing from it, and ``conf/local/model/`` shows up as a group
``local/model`` that cannot be selected. The help template
(``conf/hydra/default.yaml``) interpolates ``${cifar_dist_groups:}`` instead: this
resolver lists the groups of the sources the command really used
(``hydra.runtime.config_sources``), Hydra's own groups and ``conf/local``'s
folders left out (their options are listed under their groups).
"""

from __future__ import annotations

from typing import Iterator

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from cifar_dist.common.hydra_internals import config_repository, options_of, search_path, subgroups_of

RESOLVER = "cifar_dist_groups"
_HIDDEN = ("hydra/", "local/")  # Hydra's own groups; conf/local's option folders (not groups of their own)


def register_resolver() -> None:
    """Make ``${cifar_dist_groups:}`` known to OmegaConf (idempotent)."""
    OmegaConf.register_new_resolver(RESOLVER, config_groups, replace=True)


def _groups(repo, parent: str = "") -> Iterator[str]:
    for name in subgroups_of(repo, parent):
        group = f"{parent}/{name}" if parent else name
        if options_of(repo, group):
            yield group
        yield from _groups(repo, group)


def config_groups() -> str:
    """``group: option, option`` a line, for every group of the command's config sources."""
    sources = HydraConfig.get().runtime.config_sources
    repo = config_repository(search_path((source.provider, f"{source.schema}://{source.path}") for source in sources))
    shown = sorted(g for g in set(_groups(repo)) if not (g == "hydra" or g.startswith(_HIDDEN)))
    return "\n".join(f"{group}: {', '.join(sorted(options_of(repo, group)))}" for group in shown)
