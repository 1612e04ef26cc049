#!/usr/bin/env bash
# engine=jax on one GPU against bare Keras 3 on JAX and PyTorch eager, with no network: issue 46's GPU check,
# sized to fit the 15 minutes of a lent GPU machine (about 5 minutes of runs). Results: docs/benchmarks.md.
#
#   bash scripts/gpu_check.sh [OUT]     # OUT: where the JSON results, logs and report.md go (default /tmp/gpu_check)
#   ONLY="cifar_dist-speedrun cifar_dist-speedrun-cached" bash scripts/gpu_check.sh   # some of the runs below only
#   ONLY="cifar_dist-speedrun cifar_dist-speedrun-phases" bash scripts/gpu_check.sh  # the speedrun cut into phases
#   ONLY="model-build-default model-build-default-cached model-build-host model-build-host-cached" \
#       bash scripts/gpu_check.sh   # the first model build on the device or on the host (the speedrun's 5.2 s)
#   ONLY="model-build-default model-build-default-cached model-build-overlap-cached" \
#       bash scripts/gpu_check.sh   # JAX's GPU start overlapping Keras' import (-overlap) or not (-default): pays?
#   ONLY="first-epoch-seed-32 first-epoch-seed-32-cached first-epoch-tiny first-epoch-tiny-cached" \
#       bash scripts/gpu_check.sh   # where a (cached) run's first epoch goes against a later one (also: -speedrun)
#   ONLY="cifar_dist-speedrun cifar_dist-speedrun-cached cifar_dist-cifar10 cifar_dist-cifar10-cached airbench94" \
#       bash scripts/gpu_check.sh   # the speedrun's wall time, and CIFAR-10's scale against airbench94 itself
#
# A GPU image with JAX and its CUDA plugin (and PyTorch, for the second reference) but without Keras or Hydra
# takes them from .whl/ (wheels carried with the checkout; `pip download` them beside it: docs/install.md, "GPUs"),
# cifar_dist included (`pip wheel --no-deps -w .whl .`). Each run is one process (python -m benchmarks device), cold.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-/tmp/gpu_check}}
EPOCHS=${EPOCHS:-8}
mkdir -p "$OUT"
PY=${PYTHON:-python3}

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_check: the wheels in .whl/ did not install" >&2; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$PY" -c 'import sys, jax, numpy; print("python", sys.version.split()[0], "jax", jax.__version__, jax.devices(), "numpy", numpy.__version__)'
  KERAS_BACKEND=jax "$PY" -c 'import keras, torch; print("keras", keras.__version__, "torch", torch.__version__)' 2>&1
} | tee "$OUT/machine.txt"

# Without a GPU (the CPU mode: the script checked on a CPU machine) the runs are cut to what a 2-core CPU trains in a
# few minutes: the speedrun 2 epochs, the CIFAR-10-sized set 4,000 + 1,000 images for 1 epoch; airbench's rows (CUDA
# only) say so in one line.
if command -v nvidia-smi >/dev/null 2>&1; then
    CPU_MODE=(); SIZES=(); EPOCHS10=10
else
    CPU_MODE=(trainer.epochs=2); SIZES=(--train 4000 --test 1000); EPOCHS10=1
fi
selected() {  # selected NAME: whether this run is wanted (ONLY unset, or ONLY names it)
    [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]
}
bench() {  # bench NAME ARGS...: one `python -m benchmarks device` run, its last line shown (skipped where ONLY names others)
    local name=$1; shift
    selected "$name" || return 0
    timeout 300 "$PY" -m benchmarks device --epochs "$EPOCHS" --out "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1 \
        && tail -n 1 "$OUT/$name.log" || { echo "$name failed:"; tail -n 5 "$OUT/$name.log"; }
}
export JAX_COMPILATION_CACHE_DIR="$OUT/jax-cache"  # cold for the first run of each program, warm for its second
rm -rf "$JAX_COMPILATION_CACHE_DIR"
bench keras-seed-32 --variant keras --batch-size 32
bench keras-seed-256 --variant keras --batch-size 256
bench torch-seed-32 --variant torch --batch-size 32
bench torch-seed-256 --variant torch --batch-size 256
bench cifar_dist-seed-32 --variant cifar_dist --batch-size 32
bench cifar_dist-seed-32-cached --variant cifar_dist --batch-size 32  # the same program: from the cache
bench cifar_dist-seed-32-plain --variant cifar_dist --batch-size 32 --no-augment
bench cifar_dist-seed-32-steps --variant cifar_dist --batch-size 32 trainer.execution=steps
bench cifar_dist-seed-256 --variant cifar_dist --batch-size 256
bench cifar_dist-speedrun --variant cifar_dist --speedrun "${CPU_MODE[@]}"
bench cifar_dist-speedrun-cached --variant cifar_dist --speedrun "${CPU_MODE[@]}"
bench cifar_dist-speedrun-phases --variant cifar_dist --speedrun --phases "${CPU_MODE[@]}"  # where its wall time goes (cached)
# CIFAR-10's scale: 50,000 training images in CIFAR-10's format, made from the sample (python -m benchmarks
# cifar10-sized), trained by the speedrun recipe on airbench94's net and batch (10 epochs), then airbench94 itself
# on the same images (benchmarks/external/airbench94_muon.py, carried with the checkout: never committed).
CIFAR10="$OUT/cifar10"
if selected cifar10-sized || selected cifar_dist-cifar10 || selected cifar_dist-cifar10-cached || selected airbench94 \
        || selected airbench94-default; then
    [ -d "$CIFAR10/cifar-10-batches-py" ] \
        || "$PY" -m benchmarks cifar10-sized "$CIFAR10" "${SIZES[@]}" | tee "$OUT/cifar10-sized.log"
fi
AIRBENCH_RECIPE=(--speedrun --data "$CIFAR10" trainer.epochs=$EPOCHS10 trainer.batch_size=2000 "model.widths=[64,256,256]")
bench cifar_dist-cifar10 --variant cifar_dist "${AIRBENCH_RECIPE[@]}"
bench cifar_dist-cifar10-cached --variant cifar_dist "${AIRBENCH_RECIPE[@]}"  # its programs from the cache
airbench() {  # airbench NAME ARGS...: airbench94 on the same images (python -m benchmarks airbench), one JSON line
    local name=$1; shift
    selected "$name" || return 0
    timeout 420 "$PY" -m benchmarks airbench --data "$CIFAR10" --out "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1 \
        && tail -n 1 "$OUT/$name.log" || { echo "$name failed:"; tail -n 5 "$OUT/$name.log"; }
}
airbench airbench94 --compile-mode max-autotune  # its own torch.compile mode: minutes of autotuning, once
airbench airbench94-default --compile-mode default  # torch.compile's default mode: where the autotuning does not fit
build() {  # build NAME WHERE [ARGS...]: where the first model build's time goes (benchmarks model-build), one JSON line
    local name=$1 where=$2
    shift 2
    selected "$name" || return 0
    mkdir -p "$OUT/build"
    timeout 120 "$PY" -m benchmarks model-build --where "$where" "$@" --out "$OUT/build/$name.json" \
        2>"$OUT/build/$name.log" || { echo "$name failed:"; tail -n 5 "$OUT/build/$name.log"; }
}
build model-build-default default  # the speedrun's model as the trainer builds it (cold unless run after the speedrun)
build model-build-default-cached default
build model-build-host host  # the initializers on the host: their ops compiled now
build model-build-host-cached host
build model-build-overlap-cached default --start overlap  # JAX's GPU backend starting while Keras imports: pays?
first() {  # first NAME ARGS...: where the first epoch goes against a later one (benchmarks first-epoch), one JSON line
    local name=$1; shift
    selected "$name" || return 0
    mkdir -p "$OUT/first"
    timeout 180 "$PY" -m benchmarks first-epoch --out "$OUT/first/$name.json" "$@" >"$OUT/first/$name.log" 2>&1 \
        && tail -n 1 "$OUT/first/$name.log" || { echo "$name failed:"; tail -n 5 "$OUT/first/$name.log"; }
}
# cold when run alone (ONLY=...), from the cache when cifar_dist-seed-32 ran before; the -cached one always cached
first first-epoch-seed-32 --model seed --batch-size 32 --epochs 6
first first-epoch-seed-32-cached --model seed --batch-size 32 --epochs 6
first first-epoch-tiny --model tiny --no-augment --epochs 6
first first-epoch-tiny-cached --model tiny --no-augment --epochs 6
first first-epoch-speedrun --model speedrun --epochs 6  # the recipe (lookahead, lr schedule): its own batch
first first-epoch-speedrun-cached --model speedrun --epochs 6
if compgen -G "$OUT/*.json" >/dev/null; then
    "$PY" -m benchmarks device-report "$OUT"/*.json | tee "$OUT/report.md"
fi
