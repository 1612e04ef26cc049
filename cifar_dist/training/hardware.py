"""What the CPU can do, for choices such as bfloat16 mixed precision."""
from __future__ import annotations

from pathlib import Path


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
