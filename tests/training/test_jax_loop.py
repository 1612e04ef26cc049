"""engine=jax's own loop, fed from the device: real runs of the CLI on the ``tiny_data`` fixture.

- any number of steps per epoch runs whatever ``trainer.steps_per_execution`` says (7 steps, 4 per execution:
  4 + 3), and neither the execution's form (one compiled loop, one compiled step per dispatch) nor where the
  images live (on the device, streamed from the host) changes what is trained;
- a second run of the same model and shapes loads its compiled step from JAX's persistent cache;
- the whole run imports no TensorFlow: where it is not installed (the jax stack), nor where it is (the current
  stack).
"""

from __future__ import annotations

import importlib.util
import json
import textwrap

import pytest

from helpers.cli import QUIET_RUN, assert_ok, cli_env, read_metrics, run_cli, tiny_cifar
from helpers.no_horovod import ON_THE_STACKS_WITHOUT_HOROVOD, env_without_tensorflow

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack, pytest.mark.xdist_group("jax_loop")]

# 256 images at 36 a batch: 7 steps an epoch (a prime: Keras 3's fit would run it one step per call)
SEVEN_STEPS = ("engine=jax", "trainer.batch_size=36", "trainer.epochs=2", "trainer.seed=3", *QUIET_RUN)


def trained(tiny_data, tmp_path, name: str, *overrides: str, env=None):
    run_dir = tmp_path / name
    proc = assert_ok(
        run_cli(*tiny_cifar(tiny_data), *SEVEN_STEPS, *overrides, f"hydra.run.dir={run_dir}", cwd=tmp_path, env=env)
    )
    return read_metrics(run_dir), proc


ONE_STEP_A_DISPATCH = ("trainer.steps_per_execution=1", "trainer.execution=steps")


@pytest.fixture(scope="module")
def base_run(tiny_data, tmp_path_factory):
    """One step per dispatch, compiled into a compilation cache of its own (cold): the run the other forms of
    execution are compared with, and the first of the two runs the cache test compares."""
    folder = tmp_path_factory.mktemp("jax-loop")
    cache = folder / "cache"
    metrics, proc = trained(tiny_data, folder, "one", *ONE_STEP_A_DISPATCH, f"trainer.compilation_cache={cache}")
    return metrics, cache, folder


@ON_THE_STACKS_WITHOUT_HOROVOD
def test_any_steps_per_execution_trains_the_same_wherever_the_images_are(base_run, tiny_data, tmp_path):
    base = base_run[0]
    four, four_proc = trained(tiny_data, tmp_path, "four", "trainer.steps_per_execution=4", "trainer.execution=loop")
    streamed, _ = trained(tiny_data, tmp_path, "streamed", "trainer.steps_per_execution=4", "data.placement=stream")
    assert base["run"]["steps_per_epoch"] == 7 and four["run"]["steps_per_execution"] == 4
    assert "runs as" not in four_proc.stdout + four_proc.stderr  # no divisor is needed: 4 + 3
    assert "4 steps per execution" in four_proc.stdout + four_proc.stderr
    for other in (four, streamed):  # the same batches and steps: the same run, to float noise (other XLA fusions)
        assert other["epochs"][-1]["loss"] == pytest.approx(base["epochs"][-1]["loss"], rel=1e-4)
        assert abs(other["test"]["correct"] - base["test"]["correct"]) <= 1 and other["test"]["samples"] == 64


@ON_THE_STACKS_WITHOUT_HOROVOD
def test_a_second_run_loads_its_step_from_the_compilation_cache(base_run, tiny_data, tmp_path):
    first, cache, _ = base_run
    second, _ = trained(tiny_data, tmp_path, "second", *ONE_STEP_A_DISPATCH, f"trainer.compilation_cache={cache}")
    assert any(cache.iterdir())
    assert second["compile_s"] < first["compile_s"] / 2, (first["compile_s"], second["compile_s"])


RECORD_MODULES = textwrap.dedent(
    """
    import atexit, json, os, sys
    for name in ("tensorflow", "tf_keras", "horovod"):
        sys.modules[name] = None  # not installed, as on the jax stack
    loaded = lambda: sorted(name for name, module in sys.modules.items() if module is not None)
    atexit.register(lambda: json.dump(loaded(), open(os.environ["MODULES_OUT"], "w")))
    """
)


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is not None,
    reason="run by the jax stack's pass, where TensorFlow is not installed at all (here it would only be hidden: "
    "test_a_jax_run_imports_no_tensorflow_where_it_is_installed is this stack's)",
)
def test_engine_jax_trains_without_tensorflow(tiny_data, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    env = env_without_tensorflow(site)
    (site / "sitecustomize.py").write_text(RECORD_MODULES)
    env["MODULES_OUT"] = str(tmp_path / "modules.json")
    metrics, _ = trained(tiny_data, tmp_path, "notf", "engine=auto", "trainer.tensorboard=true", env=env)
    loaded = json.loads((tmp_path / "modules.json").read_text())
    assert not [m for m in loaded if m.split(".")[0] in ("tensorflow", "tf_keras", "horovod")]
    assert metrics["complete"] and metrics["run"]["engine"] == "jax" and metrics["run"]["tensorflow"] is None
    assert "TensorFlow is not installed" in metrics["run"]["engine_reason"]
    assert list((tmp_path / "notf" / "tensorboard" / "train").glob("events.out.tfevents.*"))


RECORD_LOADED = textwrap.dedent(
    """
    import atexit, json, os, sys
    loaded = lambda: sorted(name for name, module in sys.modules.items() if module is not None)
    atexit.register(lambda: json.dump(loaded(), open(os.environ["MODULES_OUT"], "w")))
    """
)


@ON_THE_STACKS_WITHOUT_HOROVOD
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed here")
def test_a_jax_run_imports_no_tensorflow_where_it_is_installed(tiny_data, tmp_path):
    """TensorFlow's GPU build in a JAX process breaks JAX's NCCL collectives on several GPUs (jax-ml/jax#34918),
    and costs seconds: on the current stack (TensorFlow installed) a run on the built-in data, saving checkpoints
    and TensorBoard events, must not import it (neither Keras' serializer nor TensorBoard's writer)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(RECORD_LOADED)
    env = cli_env(MODULES_OUT=str(tmp_path / "modules.json"))
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(site)
    metrics, _ = trained(tiny_data, tmp_path, "tf-installed", "trainer.tensorboard=true", env=env)
    loaded = json.loads((tmp_path / "modules.json").read_text())
    assert not [m for m in loaded if m.split(".")[0] in ("tensorflow", "tf_keras")], "TensorFlow was imported"
    assert metrics["complete"] and metrics["run"]["tensorflow"] is None
    assert list((tmp_path / "tf-installed" / "tensorboard" / "validation").glob("events.out.tfevents.*"))
