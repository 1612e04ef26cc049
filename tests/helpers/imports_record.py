"""A CLI run whose every Python process records the modules it ended with (test_lazy_imports.py), through a
``sitecustomize`` hook put first on PYTHONPATH (which the launchers forward to the ranks)."""

from __future__ import annotations

import json
import os
import textwrap

from helpers.cli import assert_ok, cli_env, run_cli, tiny_cifar

MODULES_HOOK = textwrap.dedent(
    """
    import atexit, json, os, sys
    def _record():
        path = os.path.join(os.environ["IMPORTS_OUT"], "%d.json" % os.getpid())
        with open(path, "w") as f:
            json.dump({"argv": sys.argv, "modules": sorted(sys.modules)}, f)
    atexit.register(_record)
    """
)


def run_recording_imports(tmp_path, tiny_data, *overrides):
    """Run the CLI with every process recording its modules; returns the finished run (checked to exit 0) and the
    records (one per Python process). Its run dir: ``tmp_path / "run"``.

    What a process imports does not depend on how much it trains: one epoch of ``tiny_data``."""
    out, hook = tmp_path / "imports", tmp_path / "hook"
    out.mkdir()
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(MODULES_HOOK)
    env = cli_env(
        PYTHONPATH=os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])), IMPORTS_OUT=str(out)
    )
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = run_cli(
        *tiny_cifar(tiny_data),
        "trainer.epochs=1",
        "trainer.plot=false",
        "trainer.tensorboard=false",
        f"hydra.run.dir={tmp_path / 'run'}",
        *overrides,
        cwd=tmp_path,
        env=env,
    )
    assert_ok(proc)
    return proc, [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


def loaded(record, top: str) -> bool:
    """Whether the process of ``record`` loaded the package ``top`` (or a module of it)."""
    return any(m == top or m.startswith(top + ".") for m in record["modules"])


def is_trainer(record) -> bool:
    """Whether the process of ``record`` ran the trainer."""
    return "cifar_dist.training.trainer" in record["modules"]
