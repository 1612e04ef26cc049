"""``python -m benchmarks first-epoch`` (benchmarks/bench_first_epoch.py): where engine=jax's first epoch goes
(issue 46's first epoch against a later one), for the next GPU call. Its timers wrap engine=jax's loop by name: a
rename there must fail here, not silently time nothing; and on a real run every epoch's pieces are inside the time the
run itself counted."""

import json
import sys
import types

from helpers.cli import cli_env, run_benchmark
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import bench_first_epoch  # noqa: E402


def test_every_function_the_timers_wrap_exists_and_a_renamed_one_is_named():
    from cifar_dist.training.engines import jax_fit

    assert bench_first_epoch.missing_pieces(jax_fit) == []
    renamed = types.SimpleNamespace(**{n: None for n in bench_first_epoch.PIECES if n != "_state"}, TrainSteps=None)
    assert bench_first_epoch.missing_pieces(renamed) == ["cifar_dist.training.engines.jax_fit._state"]


def test_a_run_s_epochs_are_cut_into_their_pieces(tmp_path):
    out = tmp_path / "first.json"
    proc = run_benchmark(
        "first-epoch",
        "--model=tiny",
        "--epochs=2",
        f"--out={out}",
        env=cli_env(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "cache")),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert len(result["epochs"]) == 2 and result["compile_s"] > 0
    for epoch in result["epochs"]:
        assert len(epoch["executions"]) == 8  # 127 steps (4,068 images at 32), 16 per execution: 7 x 16 + 15
        pieces = sum(epoch["executions"]) + epoch["order"][0] + epoch["state_to_devices"][0]
        assert 0 < pieces <= epoch["train_epoch"] <= epoch["train_s"] * 1.05
    assert result["first_over_later"] == round(result["first_epoch_s"] / result["later_epoch_s"], 2)
