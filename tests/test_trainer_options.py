"""Trainer options of issue 5: precision=mixed trains, jit_compile fails in one line where it cannot work, peak RSS is recorded."""
import pytest

from cifar_dist.errors import CifarDistError
from cifar_dist.training.hardware import cpu_supports_bfloat16
from cifar_dist.training.trainer import JitCompileError, check_jit_compile
from conftest import read_metrics, run_cli


def test_jit_compile_on_cpu_is_refused_with_what_to_do():
    with pytest.raises(JitCompileError, match="trainer.jit_compile=false") as err:
        check_jit_compile(True, on_gpu=False)
    assert isinstance(err.value, CifarDistError) and "\n" not in str(err.value)


def test_jit_compile_on_gpu_needs_horovods_xla_ops():
    with pytest.raises(JitCompileError, match="HOROVOD_ENABLE_XLA_OPS=1"):
        check_jit_compile(True, on_gpu=True, environ={})
    check_jit_compile(True, on_gpu=True, environ={"HOROVOD_ENABLE_XLA_OPS": "1"})
    check_jit_compile(False, on_gpu=False)


def test_jit_compile_cli_fails_fast_in_one_line(tmp_path):
    proc = run_cli("debug=fast", "trainer.jit_compile=true", f"hydra.run.dir={tmp_path / 'run'}", timeout=300)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("cifar_dist: error:")]
    assert len(errors) == 1 and "jit_compile" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(not cpu_supports_bfloat16(), reason="this CPU has no bfloat16 instructions")
def test_mixed_precision_trains_one_epoch_in_bfloat16_and_records_memory(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli("debug=fast", "trainer.epochs=1", "trainer.precision=mixed", "trainer.verbose=0",
                   f"hydra.run.dir={run_dir}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = read_metrics(run_dir)
    assert m["complete"] and m["run"]["precision"] == "mixed_bfloat16"
    # One epoch on the 4,068-image sample; the float32 softmax keeps the loss finite.
    assert m["test"]["accuracy"] > 0.12
    assert len(m["peak_rss_mb_per_rank"]) == 1 and 100 < m["peak_rss_mb_per_rank"][0] < 24 * 1024
