"""Making renames survive a crash: fsync of the folder that holds the new name."""
from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Flush ``path``'s directory entries, so a file or folder just renamed into it stays there after power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
