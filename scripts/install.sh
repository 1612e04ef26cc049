#!/usr/bin/env bash
# Install everything cifar_dist needs on a fresh Debian/Ubuntu machine, into
# ./.venv (or $CIFAR_DIST_VENV). Idempotent: a second run checks and exits fast.
#
# Three stacks (README "Compatibility", docs/install.md); CIFAR_DIST_STACK picks one:
#   horovod  TensorFlow 2.18.1 (the newest Horovod 0.28.1 builds against) and Horovod, built here;
#            the default engine is Horovod. Where setup.cfg's horovod extra admits the Python
#            (3.10, 3.11: TensorFlow 2.18.1 has wheels there, and Horovod builds).
#   current  the newest TensorFlow, tf-keras, Keras and JAX in setup.cfg's ranges for this Python,
#            no Horovod, no compiler: one process trains on TensorFlow, several on JAX (engine=auto).
#   jax      Keras 3 on JAX alone, no TensorFlow (setup.cfg's jax extra): every run trains on JAX
#            (engine=auto), what a JAX GPU image holds; Python 3.12 or newer (JAX 0.12).
#   auto     (the default) horovod where the Python admits it, else current where TensorFlow has
#            wheels for it, else jax (Python 3.14).
# The horovod stack installs the lower end of each of setup.cfg's ranges, the current stack the
# newest: the two ends the suite was run at.
#
#   1. system OpenMPI (apt, when missing; needs root), and Slurm + munge for the
#      Slurm launcher's tests (apt; skipped, saying why, without root or when apt-get fails); apt-get
#      waits for another apt or dpkg to finish (CIFAR_DIST_APT_LOCK_WAIT seconds, 600)
#   2. a virtualenv; horovod stack: TensorFlow 2.18.1 + tf-keras first, then Horovod built from
#      source against it, with MPI and Gloo; the wheel is cached in $CIFAR_DIST_WHEEL_CACHE
#      (default ~/.cache/cifar_dist/wheels) so reinstalls and CI reuse it (3-15 minutes once)
#   3. this package, editable, with the azure, dev, optuna (hydra/sweeper=optuna), tracking
#      (MLflow) and jax (engine=jax) extras; the horovod and current stacks add tensorflow and mpi
#      (mpi4py: concurrent sweeps; engine=tensorflow's processes), the horovod stack also horovod
set -euo pipefail
cd "$(dirname "$0")/.."

HOROVOD_VERSION=0.28.1
PYTHON=${PYTHON:-python3}
VENV=${CIFAR_DIST_VENV:-.venv}
STACK=${CIFAR_DIST_STACK:-auto}
CACHE_ROOT=${CIFAR_DIST_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cifar_dist/wheels}
STACK_FILE="$VENV/cifar_dist_stack"  # which stack the venv holds: a venv never mixes the two

# say, die, and the apt steps: scripts/install_system.sh (tests/project/test_install_system.py runs them with a
# fake apt-get)
# shellcheck source=scripts/install_system.sh
source scripts/install_system.sh

# 0. The stack, said first ------------------------------------------------------
# scripts/install_stack.py reads setup.cfg's extras' Python markers (the one home of "where a stack installs")
# and says which stack this Python gets, and why; or, for a stack it cannot hold, one line naming the way out.
choice=$("$PYTHON" scripts/install_stack.py "$STACK") || exit 1
STACK=${choice%%$'\t'*}
say "stack: $STACK (${choice#*$'\t'})"
if [ -f "$STACK_FILE" ] && [ "$(cat "$STACK_FILE")" != "$STACK" ]; then
    die "$VENV holds the $(cat "$STACK_FILE") stack, not $STACK: remove $VENV, or install into another one (CIFAR_DIST_VENV=.venv-$STACK)"
fi

# 1. System packages ----------------------------------------------------------------
# OpenMPI: mpirun starts the ranks of either engine; the horovod stack also compiles against it. Slurm, for the
# Slurm launcher's tests against a real single-node cluster (tests/helpers/slurm_cluster.py starts it; nothing
# runs as a service): optional, the tests skip, saying why, where it cannot be installed.
install_openmpi "$STACK"
install_slurm

# 2. Virtualenv, and the horovod stack's TensorFlow and Horovod -------------------------
if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip setuptools wheel
fi
echo "$STACK" > "$STACK_FILE"
PY="$VENV/bin/python"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }
# This package's editable install, done again only when what it installs from changed: its metadata, the extras
# asked, the checkout it points at (pip rebuilds the editable wheel every time: ~1 min, three times a `make test`).
INSTALLED_STAMP="$VENV/cifar_dist_installed"
package_stamp() {  # package_stamp EXTRAS: what an install of this checkout with EXTRAS depends on
    { cat setup.cfg setup.py pyproject.toml; echo "$1 $PWD"; } | sha256sum | cut -d' ' -f1
}
package_installed() {  # package_installed EXTRAS: the stamp matches and cifar_dist imports from this checkout
    [ "$(cat "$INSTALLED_STAMP" 2>/dev/null)" = "$(package_stamp "$1")" ] \
        && "$PY" -c 'import cifar_dist, pathlib, sys; sys.exit(pathlib.Path(cifar_dist.__file__).resolve().parents[1] != pathlib.Path.cwd().resolve())' 2>/dev/null
}
install_package() {  # install_package EXTRAS PIP-OPTIONS...: this checkout, editable, unless it is already
    local extras=$1; shift
    if package_installed "$extras"; then
        say "cifar_dist[$extras] is installed from this checkout, its metadata unchanged"
        return 0
    fi
    rm -f "$INSTALLED_STAMP"
    pip_install "$@" -e ".[$extras]"
    package_stamp "$extras" > "$INSTALLED_STAMP"
}

# The horovod stack's constraints: the lower end of every range of setup.cfg's install_requires
# (and the horovod extra's pins), so that this stack runs the suite at the ranges' lower ends.
lower_ends() {
    "$PY" - <<'PYEOF'
import configparser, re
cfg = configparser.ConfigParser()
cfg.read("setup.cfg")
extras = cfg["options.extras_require"]
lines = cfg["options"]["install_requires"].splitlines() + extras["tensorflow"].splitlines() + extras["horovod"].splitlines()
for line in lines:
    m = re.match(r"\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(?:>=|==|~=)\s*([0-9][^,;\s]*)", line)
    if m:
        print(f"{m[1]}=={m[2]}")
PYEOF
}

if [ "$STACK" = horovod ]; then
    CONSTRAINTS="$VENV/horovod-stack-constraints.txt"
    lower_ends | sort -u > "$CONSTRAINTS"
    TF_VERSION=$(sed -n 's/^tensorflow==//p' "$CONSTRAINTS" | head -n 1)
    PYTAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    WHEEL_DIR="$CACHE_ROOT/horovod-$HOROVOD_VERSION-tf$TF_VERSION-$PYTAG"
    if ! "$PY" -c "import importlib.metadata as m; assert m.version('tensorflow') == '$TF_VERSION'" 2>/dev/null; then
        say "installing tensorflow==$TF_VERSION and tf-keras (the versions Horovod is built against)"
        pip_install -c "$CONSTRAINTS" tensorflow tf-keras
    fi
    horovod_ok() {
        "$PY" - <<PYEOF >/dev/null 2>&1
import importlib.metadata as m, os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
assert m.version("horovod") == "$HOROVOD_VERSION"
import horovod.tensorflow as hvd
assert hvd.mpi_built() and hvd.gloo_built()
PYEOF
    }
    # Importing Horovod (and TensorFlow) to check it takes seconds: done again only when the installed versions
    # changed since it last passed (its stamp: the versions, read from the metadata without importing anything).
    HOROVOD_STAMP="$VENV/horovod_checked"
    installed_versions() { "$PY" -c 'import importlib.metadata as m; print(*(m.version(p) for p in ("tensorflow", "horovod")))' 2>/dev/null; }
    if [ "$(cat "$HOROVOD_STAMP" 2>/dev/null)" = "$(installed_versions)" ] && [ -n "$(installed_versions)" ]; then
        say "horovod $HOROVOD_VERSION checked before (MPI and Gloo) against these versions"
    elif ! horovod_ok; then
        wheel=$(ls "$WHEEL_DIR"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
        if [ -z "$wheel" ]; then
            say "building horovod==$HOROVOD_VERSION against TensorFlow $TF_VERSION (3-15 minutes, once; cached in $WHEEL_DIR)"
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
        pip_install -c "$CONSTRAINTS" "$wheel"   # horovod's own small dependencies
        horovod_ok || die "horovod installed but does not import with MPI and Gloo; delete $WHEEL_DIR and re-run"
    fi
    installed_versions > "$HOROVOD_STAMP"  # (checked now, or before: the same versions)
    # 3. This package, at the ranges' lower ends
    install_package azure,dev,horovod,jax,mpi,optuna,tensorflow,tracking -c "$CONSTRAINTS"
    say "ready (horovod stack): $("$PY" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("tensorflow", "horovod")))')"
elif [ "$STACK" = current ]; then
    # 3. This package and the newest TensorFlow, Keras and JAX its ranges allow (wheels; pure-Python sdists only)
    install_package azure,dev,jax,mpi,optuna,tensorflow,tracking --upgrade --upgrade-strategy only-if-needed --prefer-binary
    say "ready (current stack): $("$PY" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("tensorflow", "tf-keras", "keras", "jax")))')"
else
    # 3. This package, Keras 3 and the newest JAX, without TensorFlow (no extra asks for it)
    install_package azure,dev,jax,optuna,tracking --upgrade --upgrade-strategy only-if-needed --prefer-binary
    "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("tensorflow") is not None)' \
        || die "$VENV holds TensorFlow, which the jax stack must not: remove $VENV and re-run"
    say "ready (jax stack): $("$PY" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("keras", "jax")))'), no TensorFlow"
fi
