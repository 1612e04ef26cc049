#!/usr/bin/env bash
# Install everything cifar_dist needs on a fresh Debian/Ubuntu machine, into
# ./.venv (or $CIFAR_DIST_VENV). Idempotent: a second run checks and exits fast.
#
#   1. system OpenMPI (apt, when mpirun/mpicxx are missing; needs root), and
#      Slurm + munge for the Slurm launcher's tests (apt; skipped without root)
#   2. a virtualenv with TensorFlow + tf-keras of the verified line
#   3. Horovod built from source against that TensorFlow, with MPI and Gloo;
#      the wheel is cached in $CIFAR_DIST_WHEEL_CACHE (default
#      ~/.cache/cifar_dist/wheels) so reinstalls and CI reuse it (the build
#      takes 10-15 minutes on 2 cores)
#   4. this package, editable, with the azure, dev, mpi (mpi4py: concurrent sweeps)
#      optuna (hydra/sweeper=optuna), tracking (MLflow) and jax (engine=jax) extras
set -euo pipefail
cd "$(dirname "$0")/.."

TF_VERSION=2.18.1
TF_KERAS_VERSION=2.18.0
HOROVOD_VERSION=0.28.1
PYTHON=${PYTHON:-python3}
VENV=${CIFAR_DIST_VENV:-.venv}
CACHE_ROOT=${CIFAR_DIST_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cifar_dist/wheels}
PYTAG=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
WHEEL_DIR="$CACHE_ROOT/horovod-$HOROVOD_VERSION-tf$TF_VERSION-$PYTAG"

say() { printf '[install] %s\n' "$*"; }

# 1. System MPI ---------------------------------------------------------------
if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicxx >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        say "installing OpenMPI (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends libopenmpi-dev openmpi-bin
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        say "installing OpenMPI (sudo apt-get)"
        sudo -n apt-get update -q
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libopenmpi-dev openmpi-bin
    else
        echo "install.sh: OpenMPI is missing; run 'sudo apt-get install libopenmpi-dev openmpi-bin' and re-run" >&2
        exit 1
    fi
fi

# 1b. Slurm, for the Slurm launcher's tests against a real single-node cluster
# (tests/slurm_cluster.py starts it; nothing runs as a service). Optional: the
# tests skip, saying why, where it cannot be installed.
slurm_missing() {
    [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmd ] || [ ! -x /usr/sbin/munged ] \
        || ! command -v sbatch >/dev/null 2>&1
}
if slurm_missing; then
    slurm_pkgs="slurmctld slurmd slurm-client munge"
    if [ "$(id -u)" = 0 ]; then
        say "installing Slurm for the tests ($slurm_pkgs)"
        DEBIAN_FRONTEND=noninteractive apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q $slurm_pkgs
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        say "installing Slurm for the tests ($slurm_pkgs, sudo)"
        sudo -n apt-get update -q
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $slurm_pkgs
    else
        say "Slurm not installed (needs root): the Slurm launcher's real-cluster tests will be skipped"
    fi
fi

# 2. Virtualenv + TensorFlow ------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

if ! "$PY" - <<PYEOF 2>/dev/null
import importlib.metadata as m
assert m.version("tensorflow") == "$TF_VERSION"
assert m.version("tf-keras").startswith("${TF_KERAS_VERSION%.*}")
PYEOF
then
    say "installing tensorflow==$TF_VERSION tf-keras==$TF_KERAS_VERSION"
    pip_install --upgrade pip setuptools wheel
    pip_install "tensorflow==$TF_VERSION" "tf-keras==$TF_KERAS_VERSION"
fi

# 3. Horovod, from the wheel cache or built once ------------------------------
horovod_ok() {
    "$PY" - <<PYEOF >/dev/null 2>&1
import importlib.metadata as m, os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
assert m.version("horovod") == "$HOROVOD_VERSION"
import horovod.tensorflow as hvd
assert hvd.mpi_built() and hvd.gloo_built()
PYEOF
}
if ! horovod_ok; then
    wheel=$(ls "$WHEEL_DIR"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$wheel" ]; then
        say "building horovod==$HOROVOD_VERSION against TensorFlow $TF_VERSION (10-15 minutes, once; cached in $WHEEL_DIR)"
        pip_install cmake
        tmp="$WHEEL_DIR.partial.$$"
        rm -rf "$tmp"; mkdir -p "$tmp"
        HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
        HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
        MAKEFLAGS="-j$(nproc)" \
            "$PY" -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps -w "$tmp" "horovod==$HOROVOD_VERSION"
        mkdir -p "$WHEEL_DIR"
        mv "$tmp"/horovod-*.whl "$WHEEL_DIR"/   # a complete wheel or nothing
        rm -rf "$tmp"
        wheel=$(ls "$WHEEL_DIR"/horovod-"$HOROVOD_VERSION"-*.whl | head -n 1)
    else
        say "installing cached $wheel"
    fi
    pip_install --force-reinstall --no-deps "$wheel"
    pip_install "$wheel"   # horovod's own small dependencies
    horovod_ok || { echo "install.sh: horovod installed but does not import with MPI and Gloo; delete $WHEEL_DIR and re-run" >&2; exit 1; }
fi

# 4. This package ------------------------------------------------------------
pip_install -e ".[azure,dev,jax,mpi,optuna,tracking]"
say "ready: $("$PY" -c 'import tensorflow as tf, horovod; print(f"tensorflow {tf.__version__}, horovod {horovod.__version__}")' 2>/dev/null)"
