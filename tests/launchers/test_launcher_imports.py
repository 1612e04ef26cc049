"""The launchers' imports read one way (issue 32), counting imports inside functions:
launcher=azureml stands on its own (nothing from the retired Batch AI launcher; what both
Azure launchers share lives in launchers/azure/), and no launcher imports the app above it
(cifar_dist.app: the Batch AI node runs it as `python -m cifar_dist`, like every other launcher)."""

import ast
from pathlib import Path

from helpers.paths import REPO

LAUNCHERS = REPO / "launchers"


def imported_modules(path: Path, package: str) -> list:
    """Every module ``path`` imports, anywhere in it (relative imports resolved against ``package``)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(filter(None, [base, node.module]))
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


def launcher_modules(folder: Path) -> dict:
    """Each module below ``folder`` -> its package name, as installed (cifar_dist.launchers...)."""
    return {p: ".".join(["cifar_dist", *p.parent.relative_to(LAUNCHERS.parent).parts]) for p in folder.rglob("*.py")}


def test_no_azureml_module_imports_batchai():
    modules = launcher_modules(LAUNCHERS / "azureml")
    assert len(modules) >= 6, modules  # the package is where this test looks
    borrowed = {
        p.name: [n for n in imported_modules(p, pkg) if "batchai" in n.split(".")] for p, pkg in modules.items()
    }
    assert {name: found for name, found in borrowed.items() if found} == {}


def test_no_launcher_imports_the_app():
    modules = launcher_modules(LAUNCHERS)
    assert len(modules) > 40, len(modules)
    upward = {
        str(p.relative_to(LAUNCHERS)): [n for n in imported_modules(p, pkg) if n.startswith("cifar_dist.app")]
        for p, pkg in modules.items()
    }
    assert {path: found for path, found in upward.items() if found} == {}


def test_the_check_sees_imports_inside_functions_and_relative_ones(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from cifar_dist.launchers.batchai.client import x\n    from ..batchai import job\n"
    )
    found = imported_modules(module, "cifar_dist.launchers.azureml")
    assert "cifar_dist.launchers.batchai.client" in found and "cifar_dist.launchers.batchai.job" in found
