"""Every private API of OmegaConf cifar_dist relies on, in one place.

OmegaConf has no public way to do these; each function says which private thing it uses. An OmegaConf release
that removes or changes one fails the test named after it (tests/common/test_private_apis.py), and the fix is
here. Nothing else in the project imports ``omegaconf._*`` or calls these (tests/project/test_structure.py).
"""

from __future__ import annotations

from typing import Any


def mark(cfg, flag: str) -> None:
    """Mark a config node with a flag of cifar_dist's own, which its ``copy()`` keeps: ``Node._set_flag`` (the
    store OmegaConf's own flags, ``readonly`` and ``struct``, live in)."""
    cfg._set_flag(flag, True)


def is_marked(cfg, flag: str) -> bool:
    """Whether ``mark`` marked this node (or the node it was copied from): ``Node._get_node_flag``."""
    return cfg._get_node_flag(flag) is True


def yaml_loader() -> Any:
    """The YAML loader OmegaConf (and so Hydra) reads config files with, for an error at the same line and column
    as theirs: ``omegaconf._utils.get_yaml_loader``."""
    from omegaconf._utils import get_yaml_loader  # lazy: were it gone, only this check fails, not every import

    return get_yaml_loader()
