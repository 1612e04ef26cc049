"""A command's environment in which Horovod is not installed, as on the current stack, made on the horovod stack."""

from __future__ import annotations

from pathlib import Path

from helpers.cli import cli_env


def env_without_horovod(site: Path) -> dict:
    """``cli_env()`` with a ``sitecustomize`` in ``site`` that marks the module missing, as an uninstalled one is
    (importlib finds no spec; its metadata stays: what ``import`` sees decides)."""
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.modules['horovod'] = None  # what importlib reads as 'not installed'\n"
    )
    env = cli_env()
    env["PYTHONPATH"] = str(site) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
