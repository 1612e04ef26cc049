"""One way into the benchmarks (issue 56): ``python -m benchmarks`` lists every benchmark (what it measures, its
command, the doc section its results are in), ``python -m benchmarks NAME [ARGS...]`` runs one; every script in
benchmarks/ is a listed benchmark or a part the listed ones share."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from benchmarks.catalog import BENCHMARKS, HELPERS, HERE
from helpers.cli import cli_env, run_benchmark
from helpers.paths import REPO


@pytest.mark.parametrize("benchmark", BENCHMARKS, ids=[b.name for b in BENCHMARKS])
def test_each_benchmark_s_script_and_doc_section_exist(benchmark):
    assert benchmark.path.is_file(), benchmark.path
    page, _, section = benchmark.feeds.partition("#")
    headings = re.findall(r"^#+ (.+)$", (REPO / page).read_text("utf-8"), re.M)
    assert any(heading.startswith(section) for heading in headings), f"{page} has no section {section!r}"
    shell = benchmark.script.endswith(".sh")
    expected = ["bash", benchmark.script] if shell else ["python", "-m", "benchmarks", benchmark.name]
    assert benchmark.command.split()[: len(expected)] == expected


def test_every_script_in_benchmarks_is_a_benchmark_or_a_part_of_one():
    scripts = {path.name for path in HERE.glob("*.py")} - {"__init__.py", "__main__.py", "catalog.py"}
    named = {b.script for b in BENCHMARKS} | set(HELPERS)
    assert sorted(scripts - named) == [], "scripts python -m benchmarks does not know: list them in catalog.py"
    assert sorted(n for n in named - scripts if "/" not in n) == []


def test_the_list_names_each_benchmark_with_its_command_and_its_doc():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks"], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for benchmark in BENCHMARKS:
        assert f"{benchmark.name}  ({benchmark.script})" in proc.stdout
        assert f"$ {benchmark.command}" in proc.stdout and benchmark.feeds.partition("#")[0] in proc.stdout


def test_a_benchmark_runs_by_name_with_its_arguments(tmp_path):
    """breakdown-report on a sitting the history quotes: the script runs as ``python benchmarks/<script>`` would,
    importing its sibling (bench_phases) by name, from another directory."""
    proc = run_benchmark(
        "breakdown-report", str(REPO / "benchmarks" / "results" / "benchmark_breakdown_after.json"), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| part of the whole command |" in proc.stdout and "| interpreter and imports |" in proc.stdout


def test_an_unknown_benchmark_is_one_line_naming_the_nearest():
    proc = run_benchmark("devcie")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "benchmarks: error: no benchmark 'devcie' (python -m benchmarks lists them); did you mean `device`?"
    ]
