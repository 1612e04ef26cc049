"""The source files an Azure job ships (Batch AI: built into a wheel; Azure ML:
laid out as a code snapshot), and the content hash both cache them by.
"""

from __future__ import annotations

import configparser
import hashlib
import os
import shutil
from pathlib import Path
from typing import List, Mapping

import cifar_dist
from cifar_dist.launchers.base import LaunchError

_PROJECT_FILES = ("setup.cfg", "setup.py", "pyproject.toml", "README.md", "LICENSE")
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".hypothesis"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}
# The user's own cluster/storage names (git-ignored) stay on the user's machine.
_SKIP_PARTS = ("conf", "local")


def source_root() -> Path:
    """The source tree this package runs from (an editable install or a checkout)."""

    root = Path(cifar_dist.__file__).resolve().parent.parent
    if not (root / "setup.cfg").is_file():
        raise LaunchError(
            f"cifar_dist is installed from {root}, not from a source tree, so no wheel can be built; "
            "install it editable (pip install -e .) or pass launcher.package=<path to a cifar_dist wheel>"
        )
    return root


def source_dirs(root: Path) -> List[str]:
    """The top-level folders setup.cfg packages: its packages' top names (cifar_dist, hydra_plugins) and the
    folders its package_dir maps (conf/, launchers/, sweepers/ become cifar_dist.conf, .launchers, .sweepers)."""
    cfg = configparser.ConfigParser()
    cfg.read(root / "setup.cfg")
    options = cfg["options"]
    mapped = [line.split("=", 1)[1].strip() for line in options.get("package_dir", "").strip().splitlines()]
    return sorted({name.split(".")[0] for name in options["packages"].split()} | set(mapped))


def source_files(root: Path) -> List[Path]:
    """The files that make the package, relative to ``root``, in a stable order."""
    files = [Path(name) for name in _PROJECT_FILES if (root / name).is_file()]
    for top in source_dirs(root):
        for dirpath, dirnames, filenames in os.walk(root / top):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            rel_dir = Path(dirpath).relative_to(root)
            if rel_dir.parts[-2:] == _SKIP_PARTS:
                dirnames[:] = []
                continue
            for name in sorted(filenames):
                if Path(name).suffix not in _SKIP_SUFFIXES:
                    files.append(rel_dir / name)
    return files


def content_hash(copies: Mapping[Path, Path]) -> str:
    """The hash of ``copies`` (name in the copy -> local file): every name and its file's bytes, in order."""
    digest = hashlib.sha256()
    for dest, source in copies.items():
        digest.update(dest.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(Path(source).read_bytes()).digest())
    return digest.hexdigest()


def copy_files(copies: Mapping[Path, Path], into: Path) -> None:
    """Copy each local file of ``copies`` to its name below ``into``."""
    for dest, source in copies.items():
        (into / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, into / dest)
