"""Job names both Azure launchers give their jobs."""

from __future__ import annotations

import hashlib
from pathlib import Path


def job_name(output_dir: Path, job_num: int, prefix: str = "cifar_dist") -> str:
    """A deterministic name per run dir (and sweep point): re-running the same
    launch finds the job it already submitted instead of creating a twin."""
    digest = hashlib.sha256(str(Path(output_dir).resolve()).encode()).hexdigest()[:12]
    return f"{prefix}-{digest}-{job_num}"
