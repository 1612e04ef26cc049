"""TensorFlow's C++ start-up noise: quiet by default, one switch to see it all.

On a machine without a GPU, every process that imports TensorFlow 2.18
prints, before the first useful line: "Could not find cuda drivers" and the
CPU feature banner (INFO), "Unable to register cuDNN/cuFFT/cuBLAS factory"
(ERROR, from CUDA plugins registering twice, printed on every machine), and
"failed call to cuInit: INTERNAL: CUDA error" (ERROR) when TensorFlow looks
for GPUs. A newcomer reads "E" and "CUDA error" as failure.

Measured here: ``TF_CPP_MIN_LOG_LEVEL=1`` hides the INFO lines, but even
``3`` leaves the cuDNN/cuBLAS lines (absl logging before TensorFlow
configures it), and ``3`` would hide real errors too. So by default
cifar_dist sets level 1 (``quiet_by_default``, before TensorFlow loads) and
drops exactly the lines in ``NOISE`` from what native code writes to stderr
while TensorFlow is imported and lists devices (``filtered_native_stderr``);
every other line, real warnings and errors included, is passed on. TensorFlow
2.21 (the current stack) adds its oneDNN INFO banner, which level 1 no longer hides.
``CIFAR_DIST_TF_LOGS=all`` shows TensorFlow's output untouched; a
``TF_CPP_MIN_LOG_LEVEL`` the user set is kept. The launchers forward both
to the ranks.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from typing import Iterator, MutableMapping, Optional

SWITCH_ENV = "CIFAR_DIST_TF_LOGS"  # "all": TensorFlow's console output as it is
LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "1"  # hides INFO; WARNING and ERROR stay
NOISE = re.compile(
    r"Unable to register cu(DNN|FFT|BLAS) factory"
    r"|All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|failed call to cuInit"
    r"|Could not find cuda drivers on your machine"
    # TensorFlow >= 2.19, an INFO line that TF_CPP_MIN_LOG_LEVEL no longer hides (absl logs it before TF's level
    # applies); cifar_dist chooses the CPU kernels itself and logs which (trainer.onednn)
    r"|oneDNN custom operations are on"
)


def showing_everything(environ: Optional[MutableMapping[str, str]] = None) -> bool:
    environ = os.environ if environ is None else environ
    return environ.get(SWITCH_ENV, "").lower() == "all"


def quiet_by_default(environ: Optional[MutableMapping[str, str]] = None) -> None:
    """Set TF_CPP_MIN_LOG_LEVEL=1 unless the user chose a level or asked for everything (before TensorFlow loads)."""
    environ = os.environ if environ is None else environ
    if not showing_everything(environ):
        environ.setdefault(LEVEL_ENV, QUIET_LEVEL)


@contextmanager
def filtered_native_stderr(environ: Optional[MutableMapping[str, str]] = None) -> Iterator[None]:
    """While the block runs, stderr (fd 2, C++ included) goes to a temp file; then every line but NOISE is passed on."""
    if showing_everything(environ):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [
                line
                for line in capture.read().splitlines(keepends=True)
                if not NOISE.search(line.decode(errors="replace"))
            ]
            if kept:
                os.write(2, b"".join(kept))


def load_tensorflow_quietly_if_installed() -> None:
    """Import TensorFlow now, its start-up noise filtered, where it is installed but no engine of this process needs it.

    Keras 3 imports TensorFlow on any backend whenever it is installed (its
    serializer asks ``tf.available``: every saved model and checkpoint), at a
    moment no filter covers; on engine=jax that printed the CUDA lines above.
    Loading it here costs nothing that saving the first model would not."""
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    quiet_by_default()
    with filtered_native_stderr():
        import tensorflow  # noqa: F401  (lazy: only where installed; Keras would import it anyway)
