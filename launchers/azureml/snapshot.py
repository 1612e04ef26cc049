"""The source snapshot an Azure ML job runs: this package laid out as installed
(``cifar_dist/`` with ``conf/`` and ``launchers/`` inside), so that on the
node ``python -m cifar_dist`` runs from the job's working directory with
nothing to install beyond the environment.

Snapshots are cached by the content hash of the source files; the SDK hashes
the folder again and uploads it as a code asset only when the workspace has
no code version with that hash, so an unchanged tree is uploaded once.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from cifar_dist.launchers.batchai.staging import content_hash, source_files, source_root

# Repository folder -> where setup.cfg's package_dir installs it.
_INSTALLED_AS = {"cifar_dist": Path("cifar_dist"), "conf": Path("cifar_dist/conf"), "launchers": Path("cifar_dist/launchers")}


def source_snapshot(cache_dir: Path) -> Path:
    """The snapshot folder of the current source tree (made once per content hash)."""
    root = source_root()
    files = [f for f in source_files(root) if f.parts[0] in _INSTALLED_AS]
    target = cache_dir / "snapshots" / content_hash(root, files)[:16]
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="snapshot-", dir=target.parent) as tmp:
        staged = Path(tmp) / "code"
        for rel in files:
            dest = staged / _INSTALLED_AS[rel.parts[0]] / Path(*rel.parts[1:])
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dest)
        try:
            os.replace(staged, target)  # atomic: a concurrent snapshot of the same hash is harmless
        except OSError:
            if not target.is_dir():
                raise
    return target
