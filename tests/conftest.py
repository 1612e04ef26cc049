"""Shared fixtures: running the CLI in a subprocess, and one trained run reused by several tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def cli_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"})
    env.pop("CIFAR_DIST_CHILD", None)
    env.update(extra)
    return env


def run_cli(*overrides: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600, python: str | None = None):
    """``python -m cifar_dist <overrides>`` in a subprocess; output captured as text."""
    return subprocess.run(
        [python or sys.executable, "-m", "cifar_dist", *overrides],
        cwd=cwd or REPO,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def read_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """One short real training run on the packaged sample, shared by the end-to-end tests."""
    run_dir = tmp_path_factory.mktemp("e2e") / "run"
    proc = run_cli("data=sample", "trainer.epochs=3", "trainer.seed=7", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir, proc
