"""Trainer options of issue 5: precision=mixed/auto, jit_compile fails in one line where it cannot work, peak RSS
is recorded."""

import pytest

from cifar_dist.common.errors import CifarDistError
from cifar_dist.training.engines.horovod import JitCompileError, check_jit_compile
from cifar_dist.training.process.hardware import cpu_supports_bfloat16
from cifar_dist.training.process.keras_setup import PrecisionError, precision_policy
from helpers.cli import assert_ok, error_lines, read_metrics, run_cli


def test_jit_compile_on_cpu_is_refused_with_what_to_do():
    with pytest.raises(JitCompileError, match="trainer.jit_compile=false") as err:
        check_jit_compile(True, on_gpu=False)
    assert isinstance(err.value, CifarDistError) and "\n" not in str(err.value)


def test_jit_compile_on_gpu_needs_horovods_xla_ops():
    with pytest.raises(JitCompileError, match="HOROVOD_ENABLE_XLA_OPS=1"):
        check_jit_compile(True, on_gpu=True, environ={})
    check_jit_compile(True, on_gpu=True, environ={"HOROVOD_ENABLE_XLA_OPS": "1"})
    check_jit_compile(False, on_gpu=False)


def test_each_engine_carries_its_listed_facts_and_answers_the_jit_check_itself():
    """One list of the engines (common/engine_facts.py): each engine class carries its entry, the config has an
    option for each (and auto); the jit rule is the engine's: Horovod's (the tensorflow engine keeps it), none on
    jax, whose steps are XLA already."""
    from types import SimpleNamespace

    from cifar_dist.common.engine_facts import AUTO, ENGINES
    from cifar_dist.config.schema import ENGINE_SCHEMAS
    from cifar_dist.training.engines.horovod import HorovodEngine
    from cifar_dist.training.engines.jax import JaxEngine
    from cifar_dist.training.engines.tensorflow import TensorflowEngine

    classes = {cls.facts.name: cls for cls in (HorovodEngine, JaxEngine, TensorflowEngine)}
    assert sorted(classes) == sorted(ENGINES) and sorted(ENGINE_SCHEMAS) == sorted([*ENGINES, AUTO])
    assert all(cls.facts is ENGINES[name] for name, cls in classes.items())
    on_cpu = {}
    for name, cls in classes.items():
        engine = object.__new__(cls)  # not started: the check reads only the world's GPU and size
        engine.world = SimpleNamespace(gpu="", processes=1)  # one process (several: tensorflow refuses any jit)
        engine.check_jit_compile(False)
        try:
            engine.check_jit_compile(True)
            on_cpu[name] = "runs"
        except JitCompileError:
            on_cpu[name] = "refused"
    assert on_cpu == {"horovod": "refused", "jax": "runs", "tensorflow": "refused"}


def test_jit_compile_cli_fails_fast_in_one_line(tmp_path):
    proc = run_cli("debug=fast", "trainer.jit_compile=true", f"hydra.run.dir={tmp_path / 'run'}", timeout=300)
    assert proc.returncode == 2
    errors = error_lines(proc)
    assert len(errors) == 1 and "jit_compile" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(not cpu_supports_bfloat16(), reason="this CPU has no bfloat16 instructions")
def test_mixed_precision_trains_one_epoch_in_bfloat16_and_records_memory(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        "debug=fast",
        "trainer.epochs=1",
        "trainer.precision=mixed",
        "trainer.verbose=0",
        f"hydra.run.dir={run_dir}",
        timeout=600,
    )
    assert_ok(proc)
    m = read_metrics(run_dir)
    assert m["complete"] and m["run"]["precision"] == "mixed_bfloat16"
    # One epoch on the 4,068-image sample; the float32 softmax keeps the loss finite.
    assert m["test"]["accuracy"] > 0.12
    assert len(m["peak_rss_mb_per_rank"]) == 1 and 100 < m["peak_rss_mb_per_rank"][0] < 24 * 1024


@pytest.mark.parametrize(
    "precision, on_gpu, cpu_bf16, policy",
    [
        ("float32", True, True, "float32"),
        ("mixed", True, False, "mixed_float16"),
        ("mixed", False, True, "mixed_bfloat16"),
        ("auto", True, False, "mixed_float16"),
        ("auto", False, True, "mixed_bfloat16"),
        ("auto", False, False, "float32"),  # no native bfloat16: auto falls back, mixed refuses (below)
    ],
)
def test_precision_policy_per_hardware(precision, on_gpu, cpu_bf16, policy):
    assert precision_policy(precision, on_gpu, cpu_bf16) == policy


def test_mixed_precision_without_native_bfloat16_is_refused_with_what_to_do():
    with pytest.raises(PrecisionError, match="trainer.precision=float32, or auto") as err:
        precision_policy("mixed", on_gpu=False, cpu_bfloat16=False)
    assert isinstance(err.value, CifarDistError) and "\n" not in str(err.value)


def test_experiment_fast_trains_on_this_cpu_whatever_its_bfloat16_support(tmp_path):
    # experiment=fast asks for precision=auto: bfloat16 where the CPU has it, float32 elsewhere,
    # never the "needs bfloat16 instructions" error it gave on CPUs without avx512_bf16.
    run_dir = tmp_path / "run"
    proc = run_cli(
        "experiment=fast",
        "data=sample",
        "trainer.epochs=1",
        "trainer.warmup_epochs=0",
        "trainer.lr_decay_epochs=[]",
        "trainer.verbose=0",
        "trainer.tensorboard=false",
        f"hydra.run.dir={run_dir}",
        timeout=600,
    )
    assert_ok(proc)
    m = read_metrics(run_dir)
    assert m["complete"] and m["run"]["precision"] == ("mixed_bfloat16" if cpu_supports_bfloat16() else "float32")
    assert m["run"]["global_batch_size"] == 64 and m["test"]["accuracy"] > 0.12
