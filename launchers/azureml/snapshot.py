"""The source snapshot an Azure ML job runs: this package laid out as installed
(``cifar_dist/`` with ``conf/`` and ``launchers/`` inside), so that on the
node ``python -m cifar_dist`` runs from the job's working directory with
nothing to install beyond the environment.

The user's own files the job was composed from (``launchers/user_sources.py``: their
``_target_`` modules under ``user/code/``, their config dirs under
``user/conf/<n>/``) are copied in beside the package, so the job's command
points at them relative to the snapshot.

Snapshots are cached by the content hash of all those files; the SDK hashes
the folder again and uploads it as a code asset only when the workspace has
no code version with that hash, so an unchanged tree is uploaded once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping, Optional

from cifar_dist.common.atomic_files import publish_dir
from cifar_dist.launchers.azure.package_sources import content_hash, copy_files, source_files, source_root

# Repository folder -> where setup.cfg's package_dir installs it.
_INSTALLED_AS = {
    "cifar_dist": Path("cifar_dist"),
    "conf": Path("cifar_dist/conf"),
    "launchers": Path("cifar_dist/launchers"),
}


def source_snapshot(cache_dir: Path, user_files: Optional[Mapping[str, Path]] = None) -> Path:
    """The snapshot folder of the current source tree plus ``user_files`` (snapshot path -> local
    file, ``user_sources.Shipped.files``), made once per content hash."""
    root = source_root()
    files = [f for f in source_files(root) if f.parts[0] in _INSTALLED_AS]
    copies = {_INSTALLED_AS[rel.parts[0]].joinpath(*rel.parts[1:]): root / rel for rel in files}
    copies.update({Path(rel): Path(local) for rel, local in sorted((user_files or {}).items())})
    target = cache_dir / "snapshots" / content_hash(copies)[:16]
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="snapshot-", dir=target.parent) as tmp:
        staged = Path(tmp) / "code"
        copy_files(copies, staged)
        publish_dir(staged, target)  # a concurrent snapshot of the same hash is harmless
    return target
