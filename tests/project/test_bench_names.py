"""The bench's phase markers name package functions as strings (several private to the trainer): every one
must exist, so a rename fails here instead of silently merging its phase (benchmarks/bench_phases.py)."""

import sys

from helpers.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import bench_phases  # noqa: E402


def test_every_function_the_phase_markers_name_exists_and_is_wrapped():
    assert bench_phases.function_markers(), "no marker names a package function: the check would prove nothing"
    assert bench_phases.missing_functions() == []


def test_a_renamed_function_is_named(monkeypatch):
    renamed = [("renamed", "final test", "R", "cifar_dist.training.trainer._evaluate_exactly:exit")]
    monkeypatch.setattr(bench_phases, "AFTER_FIT", bench_phases.AFTER_FIT + renamed)
    assert bench_phases.missing_functions() == [
        "cifar_dist.training.trainer._evaluate_exactly: not in the package",
        "cifar_dist.training.trainer._evaluate_exactly: a marker, but benchmarks/phase_probe does not wrap it",
    ]
