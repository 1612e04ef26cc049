"""Benchmark: where one training step of the seed CNN spends its time, and how close it is to this CPU's limit.

Issue 5 asks for cifar_dist on 1 rank at >= 1.5x the seed script's images/s
"with the model's maths identical". This script measures how much room there
is for that on the machine it runs on:

1. **Roofline.** The seed CNN's training FLOPs per image are counted from its
   layer shapes (forward, gradient w.r.t. weights, gradient w.r.t. inputs,
   the first layer's input gradient skipped as TensorFlow skips it); the CPU's
   fp32 ceiling is measured as the best of a large ``tf.matmul`` (oneDNN's
   most efficient kernel). Steady-state images/s x FLOPs per image gives the
   fraction of that ceiling one step already reaches.
2. **Overhead.** One warmed-up ``model.fit`` on in-memory, pre-batched data
   (no augmentation: the framework floor, as the "bare Keras" variant) is
   traced with TensorFlow's profiler: the time between calls into TensorFlow
   (Python, Keras; one call per step unless ``--steps-per-execution``), the
   share of wall time in which no TensorFlow op runs at all, and the ops that
   take the time.

Whatever is not spent in the model's own kernels is the most any rework that
keeps the maths identical could win.

    python scripts/bench_step_profile.py --steps 120 --out docs/step_profile.json
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import tempfile
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def training_flops_per_image(model) -> dict:
    """Multiply-adds x 2 of forward and backward passes, per image, from layer shapes."""
    import tensorflow as tf

    forward = backward = 0
    first = True
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.Conv2D):
            _, oh, ow, oc = layer.output.shape
            kh, kw = layer.kernel_size
            ic = layer.input.shape[-1]
            macs = oh * ow * oc * kh * kw * ic
        elif isinstance(layer, tf.keras.layers.Dense):
            macs = layer.input.shape[-1] * layer.units
        else:
            continue
        forward += 2 * macs
        # d/dweights always; d/dinputs except for the first layer (nothing upstream needs it).
        backward += 2 * macs * (1 if first else 2)
        first = False
    return {"forward": forward, "backward": backward, "total": forward + backward}


def matmul_gflops(n: int = 2048, repeats: int = 10, rounds: int = 5) -> float:
    """Best fp32 GFLOP/s of an n x n matmul: the CPU's practical ceiling under TensorFlow."""
    import tensorflow as tf

    a, b = tf.random.normal((n, n)), tf.random.normal((n, n))
    mm = tf.function(tf.matmul)
    mm(a, b).numpy()
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            out = mm(a, b)
        out.numpy()
        best = max(best, repeats * 2 * n**3 / (time.perf_counter() - start) / 1e9)
    return best


def _xplane(logdir: str):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    return next(p for p in space.planes if p.name == "/host:CPU")


def analyse_trace(logdir: str) -> dict:
    """Call times, gaps between calls into TensorFlow, op-free wall time and the top ops of one traced fit()."""
    plane = _xplane(logdir)
    names = plane.event_metadata
    steps, ops = [], []
    for line in plane.lines:
        base = line.timestamp_ns * 1000  # picoseconds
        for ev in line.events:
            name = names[ev.metadata_id].name
            start = base + ev.offset_ps
            if line.name == "python" and name == "train_function":
                steps.append((start, start + ev.duration_ps))
            # TensorFlow op events are "<node name>:<op type>"; executor and pool wrappers have no colon.
            elif line.name != "python" and ":" in name and "::" not in name:
                ops.append((start, start + ev.duration_ps, name.rsplit(":", 1)[1]))
    steps.sort()
    t0, t1 = steps[0][0], steps[-1][1]
    # Wall time with no op running anywhere (union of op intervals).
    busy, cur_s, cur_e = 0, None, None
    for s, e, _ in sorted((max(s, t0), min(e, t1), k) for s, e, k in ops if e > t0 and s < t1):
        if cur_e is None or s > cur_e:
            busy += (cur_e - cur_s) if cur_e is not None else 0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += (cur_e - cur_s) if cur_e is not None else 0
    by_type = collections.Counter()
    for s, e, kind in ops:
        by_type[kind] += e - s
    total_op = sum(by_type.values()) or 1
    gaps = [b[0] - a[1] for a, b in zip(steps, steps[1:])]
    wall = t1 - t0
    return {
        "calls": len(steps),  # calls of Keras' train_function (steps_per_execution steps each)
        "call_ms_mean": sum(e - s for s, e in steps) / len(steps) / 1e9,
        "gap_between_calls_ms_mean": (sum(gaps) / len(gaps) / 1e9) if gaps else 0.0,
        "wall_ms": wall / 1e9,
        "no_op_running_fraction": 1 - busy / wall,
        "op_time_share_by_type": {k: round(v / total_op, 4) for k, v in by_type.most_common(12)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=120, help="traced steps (after one warm-up epoch)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=1,
        help="Keras compile(steps_per_execution): 1 = Keras' default, as bare Keras; cifar_dist uses 16",
    )
    parser.add_argument(
        "--seed-images-per-sec",
        type=float,
        default=None,
        help="the seed reference's images/s from a benchmark run, to express the 1.5x target in GFLOP/s",
    )
    parser.add_argument("--out", default=None, help="JSON file to write (also printed)")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from cifar_dist.models.seed_cnn import build

    model = build()
    model.compile(
        loss="categorical_crossentropy",
        metrics=["accuracy"],
        steps_per_execution=args.steps_per_execution,
        optimizer=tf.keras.optimizers.legacy.RMSprop(learning_rate=1e-4, decay=1e-6),
    )
    flops = training_flops_per_image(model)

    rng = np.random.default_rng(0)
    n = args.batch_size * 127  # one epoch of the packaged sample at batch 32
    x = rng.random((n, 32, 32, 3), dtype=np.float32)
    y = tf.keras.utils.to_categorical(rng.integers(0, 10, n), 10)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size, drop_remainder=True).cache().repeat()
    steps_per_epoch = n // args.batch_size
    model.fit(data, epochs=1, steps_per_epoch=steps_per_epoch, verbose=0)  # warm-up: tracing, kernel selection

    start = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=steps_per_epoch, verbose=0)
    untraced_rate = steps_per_epoch * args.batch_size / (time.perf_counter() - start)

    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0)
        tf.profiler.experimental.stop()
        trace = analyse_trace(logdir)

    ceiling = matmul_gflops()
    achieved = untraced_rate * flops["total"] / 1e9
    result = {
        "what": "seed CNN, batch %d, legacy RMSprop, fit on in-memory data, TensorFlow default threads"
        % args.batch_size,
        "steps_per_execution": args.steps_per_execution,
        "tensorflow": tf.__version__,
        "cpu_cores": os.cpu_count(),
        "training_mflop_per_image": round(flops["total"] / 1e6, 1),
        "images_per_sec": round(untraced_rate, 1),
        "achieved_gflops": round(achieved, 1),
        "fp32_matmul_ceiling_gflops": round(ceiling, 1),
        "fraction_of_ceiling": round(achieved / ceiling, 3),
        "images_per_sec_at_ceiling": round(ceiling * 1e9 / flops["total"], 1),
        "trace": trace,
    }
    if args.seed_images_per_sec:
        need = 1.5 * args.seed_images_per_sec
        result["target_1_5x_seed"] = {
            "seed_images_per_sec": args.seed_images_per_sec,
            "images_per_sec": round(need, 1),
            "gflops": round(need * flops["total"] / 1e9, 1),
            "fraction_of_ceiling": round(need * flops["total"] / 1e9 / ceiling, 3),
            "vs_this_floor": round(need / untraced_rate, 3),
        }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
