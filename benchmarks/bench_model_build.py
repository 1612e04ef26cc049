"""Where engine=jax's first model build goes, on the device or on the host: one fresh process per measurement.

The speedrun's phase probe on the H200 (docs/benchmarks.md) found its first model build at 5.2 s of an 18.6 s
run with a warm compilation cache: Keras' import, then every initializer of every variable run eagerly, each its
own small XLA program on the device. This script times those parts apart, as the trainer does them (the probe
build, then the real one under Keras' ``DataParallel`` distribution), with the initializers run where
``--where`` says:

* ``default``: JAX's default device (the GPU where there is one): what the trainer does today;
* ``host``: under ``jax.default_device(<the CPU>)``, so that the initializers run on the host and the
  distribution's ``device_put`` carries each variable to the devices once.

It checks that the real model's variables end on the distribution's devices either way, and prints one JSON line
(also written to ``--out``). On a machine without a GPU both are the same device: only the checks mean anything.

``--start overlap`` starts JAX's backend (on a GPU: the CUDA client, ~0.7 s of JAX's 1.2 s start on the H200) in a
thread while the main thread imports Keras (2.7 s there, pure Python), instead of one after the other; whether that
pays depends on the backend's start releasing the GIL, which only a GPU can tell (on a CPU the client takes
~0.04 s). ``jax_and_keras_s`` is the time until both are ready, comparable between the two.

    python -m benchmarks model-build --where default --out build-default.json
    python -m benchmarks model-build --where host --out build-host.json
    python -m benchmarks model-build --start overlap --out build-overlap.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import time
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--where", choices=("default", "host"), default="default")
    parser.add_argument("--start", choices=("serial", "overlap"), default="serial", help="JAX's backend, then Keras")
    parser.add_argument("--widths", default="32,64,64", help="airbench's widths (experiment=speedrun's)")
    parser.add_argument("--cache", default="", help="JAX's compilation cache (JAX_COMPILATION_CACHE_DIR wins)")
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ["KERAS_BACKEND"] = "jax"
    times = {}
    start = time.perf_counter()
    import jax

    from cifar_dist.training.engines.jax_devices import use_compilation_cache

    use_compilation_cache(jax, args.cache)  # as the engine does: every compile cached
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        backend = pool.submit(jax.devices) if args.start == "overlap" else None  # in a thread, while Keras imports
        started = jax.devices() if backend is None else None
        times["jax_start_s"] = time.perf_counter() - start  # overlap: the import only
        import keras

        times["keras_import_s"] = time.perf_counter() - start - times["jax_start_s"]
        platform = (started or backend.result())[0].platform
    times["jax_and_keras_s"] = time.perf_counter() - start
    from cifar_dist.models.airbench import build

    widths = [int(w) for w in args.widths.split(",")]

    def where():
        return jax.default_device(jax.devices("cpu")[0]) if args.where == "host" else contextlib.nullcontext()

    mark = time.perf_counter()
    with where():
        probe = build(num_classes=10, widths=widths, keras=keras)
    times["probe_build_s"] = time.perf_counter() - mark
    del probe
    keras.backend.clear_session()
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=keras.distribution.list_devices(), auto_shard_dataset=False)
    )
    mark = time.perf_counter()
    with where():
        model = build(num_classes=10, widths=widths, keras=keras)
    values = [v.value for v in model.variables]
    jax.block_until_ready(values)
    times["real_build_s"] = time.perf_counter() - mark
    devices = sorted({str(d) for v in values for d in v.devices()})
    expected = sorted(str(d) for d in jax.devices())
    result = {
        "where": args.where,
        "start": args.start,
        "platform": platform,
        "variables": len(values),
        "variable_devices": devices,
        "on_the_distribution_s_devices": devices == expected,
        **{k: round(v, 3) for k, v in times.items()},
    }
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
