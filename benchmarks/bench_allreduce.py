"""engine=tensorflow's gradient averaging, two ways, measured side by side: MPI (mpi4py) and TensorFlow's own
collective ops. What docs/engines.md's choice between them rests on (docs/benchmarks.md has the numbers).

    python -m benchmarks allreduce --python .venv-current/bin/python --steps 120 --reps 2

Each mechanism trains the seed CNN (``cifar_dist.models.seed_cnn``, Keras 2, RMSprop) with Keras' ``fit`` on
random CIFAR-shaped images, batch 32 per process, on 2 processes that ``mpirun`` binds to one core each (one
TensorFlow thread each, as engine=tensorflow's thread plan gives 2 ranks on 2 cores), and reports the images/s of
the whole job over the steps after the first 20 (tracing and warm-up), and the time of one allreduce of the
gradients' size (1.25 M floats) alone, inside a ``tf.function``:

- ``mpi``: engine=tensorflow's optimizer (``mpi_gradients.averaging_optimizer``: one fused buffer a step,
  ``tf.numpy_function`` -> ``MPI_Allreduce``; Open MPI's shared memory between the two processes);
- ``tf_collective``: ``tf.distribute.MultiWorkerMirroredStrategy`` (TensorFlow's ``CollectiveReduceV2`` over
  its gRPC channels, ring), the model built in its scope, the gradients all-reduced by the strategy;
- ``alone``: no averaging at all (each process trains by itself): the ceiling either can reach.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parents[1]
MECHANISMS = ("mpi", "tf_collective", "alone")
WARMUP_STEPS = 20
BATCH = 32


def free_ports(count: int) -> List[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def worker(mechanism: str, steps: int) -> None:
    """One process of the job (under mpirun): trains ``steps`` steps, prints rank 0's measurement as JSON."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np

    import cifar_dist  # noqa: F401  (TF_USE_LEGACY_KERAS=1: tf.keras is Keras 2, as the engine trains it)
    from cifar_dist.training.engines.mpi_peers import join_peers

    peers = join_peers()  # MPI (mpi4py): rank, size, and the mpi mechanism's collectives
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from cifar_dist.models.seed_cnn import build

    strategy = None
    if mechanism == "tf_collective":
        ports = json.loads(os.environ["BENCH_PORTS"])
        os.environ["TF_CONFIG"] = json.dumps(
            {
                "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                "task": {"type": "worker", "index": peers.rank},
            }
        )
        ring = tf.distribute.experimental.CommunicationImplementation.RING
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=ring)
        )
    rng = np.random.default_rng(peers.rank)
    images = rng.random((BATCH * 8, 32, 32, 3), dtype=np.float32)
    labels = tf.keras.utils.to_categorical(rng.integers(0, 10, BATCH * 8), 10)
    global_batch = BATCH * (peers.size if strategy else 1)
    data = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(global_batch, drop_remainder=True)
    if strategy:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        data = data.with_options(options)
    with strategy.scope() if strategy else _nothing():
        model = build(10)
        optimizer = tf.keras.optimizers.legacy.RMSprop(1e-4)
        if mechanism == "mpi":
            from cifar_dist.training.engines.mpi_gradients import averaging_optimizer

            optimizer = averaging_optimizer(optimizer, peers)
        model.compile(optimizer=optimizer, loss="categorical_crossentropy", steps_per_execution=1)
    timer = step_timer(tf)
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[timer])
    measured = timer.times[WARMUP_STEPS:]
    images_per_s = peers.size * BATCH * len(measured) / sum(measured)
    allreduce_ms = allreduce_time_ms(mechanism, peers, strategy, tf, np)
    if peers.rank == 0:
        print("RESULT " + json.dumps({"images_per_s": images_per_s, "allreduce_ms": allreduce_ms}), flush=True)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def step_timer(tf):
    """A Keras 2 callback that keeps each step's wall time (``times``; ``times[WARMUP_STEPS:]`` are measured)."""

    class StepTimer(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times: List[float] = []
            self.started = 0.0

        def on_train_batch_begin(self, batch, logs=None):
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter() - self.started)

    return StepTimer()


def allreduce_time_ms(mechanism: str, peers, strategy, tf, np, size: int = 1_250_858, reps: int = 30) -> float:
    """The median time of one allreduce of ``size`` floats inside a ``tf.function`` (0 for ``alone``)."""
    if mechanism == "alone":
        return 0.0
    buffer = tf.constant(np.ones(size, np.float32))
    if mechanism == "mpi":
        from cifar_dist.training.engines.mpi_gradients import mean_over_peers

        reduce = tf.function(lambda x: mean_over_peers([x], peers)[0])
    else:
        # ``strategy.run`` of a replica function whose all_reduce is what fit's gradient step calls; the value placed
        # on the worker's device (a tensor traced without one gives the collective no destination)
        device = strategy.extended.worker_devices[0]

        def all_reduce(y):
            with tf.device(device):
                return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, tf.identity(y))

        reduce = tf.function(lambda x: strategy.run(all_reduce, args=(x,)))
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        result = reduce(buffer)
        _ = np.asarray(strategy.experimental_local_results(result)[0] if strategy else result)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times[5:])


def launch(python: str, mechanism: str, steps: int) -> Optional[dict]:
    argv = ["mpirun", "-np", "2", "--map-by", "slot:PE=1", "--bind-to", "core"]
    argv += ["--allow-run-as-root"] if os.geteuid() == 0 else []
    env = {**os.environ, "BENCH_PORTS": json.dumps(free_ports(2)), "PYTHONPATH": str(REPO)}
    argv += ["-x", "BENCH_PORTS", "-x", "PYTHONPATH", python, __file__, "--worker", mechanism, "--steps", str(steps)]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    found = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not found:
        print(f"{mechanism}: failed: {(proc.stderr.strip().splitlines() or ['?'])[-1][:300]}", file=sys.stderr)
        return None
    return json.loads(found[-1][len("RESULT ") :])


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable, help="the venv's python (the stack measured)")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--reps", type=int, default=2, help="interleaved rounds; the table gives the medians")
    p.add_argument("--mechanisms", default=",".join(MECHANISMS))
    p.add_argument("--worker", choices=MECHANISMS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.steps)
        return 0
    results = {m: [] for m in args.mechanisms.split(",")}
    for rep in range(args.reps):
        for mechanism in results:
            r = launch(args.python, mechanism, args.steps)
            print(f"[{time.strftime('%H:%M:%S')}] {mechanism} round {rep}: {r}", flush=True)
            results[mechanism].append(r)
    print(f"\n    python {' '.join(sys.argv)}\n")
    print("| mechanism | images/s (2 processes) | one allreduce of 1.25 M floats, ms |\n|---|---:|---:|")
    for mechanism, rs in results.items():
        ok = [r for r in rs if r]
        if not ok:
            print(f"| {mechanism} | failed | |")
            continue
        rate = statistics.median(r["images_per_s"] for r in ok)
        print(f"| {mechanism} | {rate:.0f} | {statistics.median(r['allreduce_ms'] for r in ok):.2f} |")
    return 0 if all(all(rs) for rs in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
