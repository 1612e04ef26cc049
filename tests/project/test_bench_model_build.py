"""``python -m benchmarks model-build`` (benchmarks/bench_model_build.py): a model built with its initializers on
the host ends on the distribution's devices (two CPU devices here, as XLA makes them on request), so that its GPU
timing compares two builds of one model."""

import json

from helpers.cli import cli_env, run_benchmark


def test_a_model_built_on_the_host_ends_on_every_device_of_the_distribution(tmp_path):
    env = cli_env(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    out = tmp_path / "build.json"
    proc = run_benchmark("model-build", "--where=host", f"--cache={tmp_path / 'cache'}", f"--out={out}", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["where"] == "host" and result["variables"] > 20
    assert len(result["variable_devices"]) == 2  # replicated on both devices, wherever the initializers ran
    assert result["on_the_distribution_s_devices"] is True
    assert all(result[k] >= 0 for k in ("keras_import_s", "probe_build_s", "real_build_s"))


def test_the_overlapped_start_builds_the_same_model_on_the_same_devices(tmp_path):
    """``--start overlap`` (JAX's backend started in a thread while Keras imports): the same build, both ready."""
    env = cli_env(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    out = tmp_path / "build.json"
    proc = run_benchmark("model-build", "--start=overlap", f"--cache={tmp_path / 'cache'}", f"--out={out}", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["start"] == "overlap" and result["platform"] == "cpu" and result["variables"] > 20
    assert len(result["variable_devices"]) == 2 and result["on_the_distribution_s_devices"] is True
    assert result["jax_and_keras_s"] >= result["jax_start_s"] + result["keras_import_s"] - 0.01
