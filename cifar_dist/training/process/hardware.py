"""What the CPU can do, and which of TensorFlow's CPU kernels to use on it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cifar_dist.common.errors import CifarDistError

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"


class OneDnnError(CifarDistError, RuntimeError):
    pass


def cpu_flags() -> set:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_supports_bfloat16() -> bool:
    """True when the CPU has native bfloat16 maths (AVX512-BF16 or AMX-BF16)."""
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def onednn_enabled() -> bool:
    """Whether the TensorFlow of this process runs its CPU ops on oneDNN (imports TensorFlow)."""
    from tensorflow.python.util import _pywrap_util_port  # lazy: TensorFlow

    return bool(_pywrap_util_port.IsMklEnabled())


def use_onednn(enabled: bool, environ=None) -> None:
    """Choose oneDNN (True) or Eigen (False) CPU kernels, before TensorFlow loads.

    TensorFlow's x86 builds carry both, but turn oneDNN on by default only on
    CPUs with AVX512-VNNI/BF16 or AMX; on AVX2 CPUs they run Eigen's kernels,
    which for the seed CNN were up to ~1.2x slower on a Zen 3 AMD EPYC (same
    float32 maths: direct convolutions either way, summed in another order;
    docs/benchmarks-history.md). TensorFlow reads the choice once, when it is
    imported, from TF_ENABLE_ONEDNN_OPTS; a process that imported it already
    keeps what it has, so a mismatch there is an error, not a silent no-op.
    """
    environ = os.environ if environ is None else environ
    wanted = "1" if enabled else "0"
    if "tensorflow" not in sys.modules:
        environ[ONEDNN_ENV] = wanted
        return
    if onednn_enabled() != enabled:
        raise OneDnnError(
            f"trainer.onednn={str(enabled).lower()} cannot apply: TensorFlow was imported before cifar_dist set "
            f"{ONEDNN_ENV}; export {ONEDNN_ENV}={wanted} before starting Python, "
            f"or use trainer.onednn={str(not enabled).lower()}"
        )
