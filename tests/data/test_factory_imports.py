"""A ``data=custom`` factory that cannot be imported (issue 57, item 15): Hydra's "Are you sure that module ... is
installed?" came first and the real reason (the ImportError or SyntaxError inside the user's module) was cut off.
Now one line names the module, the file and line, and the error: before anything is written where its source
says so (cifar_dist/data/custom.py's ``factory_problem``), else where it is imported."""

from __future__ import annotations

import pytest

from cifar_dist.config.data_options import CustomDataConfig
from cifar_dist.data import DataError
from cifar_dist.data.custom import factory_problem, load_custom
from cifar_dist.data.sources import host_memory_budget
from helpers.cifar_fixtures import data_cfg
from helpers.cli import cli_env, one_error_line, run_cli

MAKE = "\ndef make(seed, **kw):\n    pass\n"
MODULES = {
    "imports_missing": "import os\nimport not_a_real_module_xyz\n" + MAKE,
    "syntax_error": "def make(seed, **kw):\n    return (1,\n",
    "fails_on_import": "import os\nx = 1 / 0\n" + MAKE,
    "no_such_function": "def other(seed, **kw):\n    pass\n",
    # Not refused from their source: a guarded import, a module that adds its own path.
    "guarded": "try:\n    import not_a_real_module_xyz\nexcept ImportError:\n    pass\n" + MAKE,
    "own_path": "import sys\nsys.path.insert(0, '/opt/x')\nimport not_a_real_module_xyz\n" + MAKE,
}

BUDGET = host_memory_budget()  # what load_dataset gives one process (the factories here fail before reading)


@pytest.fixture
def factories(tmp_path, monkeypatch):
    for name, source in MODULES.items():
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_what_the_source_tells_is_one_line_naming_the_file_and_line(factories):
    where = factories
    assert factory_problem("imports_missing.make") == (
        f"data._target_=imports_missing.make cannot be imported: importing imports_missing fails at "
        f"{where}/imports_missing.py:2: no module named 'not_a_real_module_xyz' is installed here; install it (or "
        "put it on PYTHONPATH)"
    )
    assert factory_problem("syntax_error.make") == (
        f"data._target_=syntax_error.make cannot be imported: importing syntax_error fails at {where}/syntax_error.py:2"
        ": SyntaxError: '(' was never closed"
    )
    assert factory_problem("no_such_function.make") == (
        f"data._target_=no_such_function.make: {where}/no_such_function.py defines no `make`"
    )
    assert factory_problem("not_a_module_here.make").startswith(
        "data._target_=not_a_module_here.make cannot be imported: no module named 'not_a_module_here'; put its module"
    )
    for fine in ("fails_on_import.make", "guarded.make", "own_path.make"):  # only running them tells
        assert factory_problem(fine) is None, fine
    assert factory_problem("imports_missing.make", packages_here=False) is None  # a job's own environment may


def test_what_only_importing_tells_is_one_line_naming_the_file_and_line(factories):
    for name, line, error in (
        ("fails_on_import", 2, "ZeroDivisionError: division by zero"),
        ("imports_missing", 2, "ModuleNotFoundError: No module named 'not_a_real_module_xyz'"),
        ("own_path", 3, "ModuleNotFoundError: No module named 'not_a_real_module_xyz'"),
    ):
        with pytest.raises(DataError) as refused:
            load_custom(data_cfg(CustomDataConfig, _target_=f"{name}.make"), seed=1, arrays=False, budget=BUDGET)
        assert str(refused.value) == (
            f"data._target_={name}.make cannot be imported: importing {name} fails at {factories}/{name}.py:{line}: "
            f"{error}"
        )
    with pytest.raises(DataError, match=r"^data._target_=guarded.nope: guarded has no `nope`$"):
        load_custom(data_cfg(CustomDataConfig, _target_="guarded.nope"), seed=1, arrays=False, budget=BUDGET)


def test_the_cli_says_it_in_one_line_before_the_run_dir_exists(factories, tmp_path):
    run_dir = tmp_path / "run"
    env = cli_env(PYTHONPATH=f"{factories}:{cli_env().get('PYTHONPATH', '')}".rstrip(":"))
    proc = run_cli("data=custom", "data._target_=imports_missing.make", f"hydra.run.dir={run_dir}", env=env)
    line = one_error_line(proc)
    assert f"importing imports_missing fails at {factories}/imports_missing.py:2: no module named" in line, line
    assert "Are you sure" not in proc.stdout + proc.stderr and not run_dir.exists()
