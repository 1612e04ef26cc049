"""Where things are and what this machine allows: the checkout, the shared reference data beside it, a private tmpfs,
and the one line a Horovod test is skipped with where Horovod is absent."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
# Real reference data (CIFAR-10 subset, Batch AI schemas) kept beside the repo, never downloaded by a test;
# CIFAR_DIST_SHARED points elsewhere (e.g. from a git worktree that does not sit beside it).
SHARED = Path(os.environ.get("CIFAR_DIST_SHARED") or REPO.parent / "shared")


NO_HOROVOD = (
    "needs Horovod, which this environment does not have (the current stack; the horovod stack has it: "
    "CIFAR_DIST_STACK=horovod make install, Python 3.10/3.11, docs/install.md)"
)


def shared_path(*parts: str, folder: bool = False) -> Path:
    """A file (or folder) of the shared reference data; the test is skipped, saying what is missing, if absent."""
    path = SHARED.joinpath(*parts)
    if not (path.is_dir() if folder else path.is_file()):
        pytest.skip(
            f"shared reference data missing: {path} is not there (the shared/ folder beside the repo, "
            "or set CIFAR_DIST_SHARED to where it is)"
        )
    return path


def can_mount_tmpfs() -> bool:
    """Whether a small tmpfs can be mounted in a private user+mount namespace (``unshare -rm``)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not can_mount_tmpfs(), reason="cannot mount a tmpfs in a user+mount namespace here")
