"""Where engine=jax's first epoch goes, against a later one: issue 46's "first epoch <= 2x a later one".

The training step is compiled (or loaded from JAX's persistent cache) before the first epoch starts
(``compile_s``), yet on the H200 a cached run's first epoch still took 1.6-3.7x a later one (docs/benchmarks.md).
This runs ``python -m cifar_dist engine=jax data=sample`` in this process, with timers around the pieces of each
epoch's training (``jax_fit``: the epoch's order, the state onto the devices, each execution, the state back,
Keras' metric results; each timer waits for its results), and writes one JSON object per run:

    python -m benchmarks first-epoch --model tiny --out /tmp/first.json          # cold, then again: cached
    python -m benchmarks first-epoch --model seed --batch-size 32 --out ... [overrides]

``epochs``: per epoch, ``train_s`` (what the run's EpochTimer counts: training, validation excluded) and the
seconds of each piece (``executions``: every call of the compiled step, in order). Run twice with the same
``JAX_COMPILATION_CACHE_DIR``: the second run's first epoch is the cached one. The timers block on each piece's
result, so a piece's time is its own, and an epoch runs a little slower than unprobed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
# jax_fit's functions whose calls are timed: each piece of an epoch's training (_train_epoch's body).
PIECES = ("epoch_order", "_state", "_train_epoch")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("tiny", "seed", "speedrun"), default="tiny")
    parser.add_argument("--batch-size", type=int, default=32, help="not with --model speedrun: the recipe's own")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--no-augment", action="store_true", help="data.augment.enabled=false")
    parser.add_argument("--out", required=True, help="the JSON result")
    parser.add_argument("overrides", nargs="*", help="more cifar_dist overrides")
    return parser.parse_args(argv)


def missing_pieces(jax_fit) -> list:
    """The names this script times that jax_fit no longer has (a rename would silently time nothing)."""
    names = [*PIECES, "TrainSteps"]
    return [f"cifar_dist.training.engines.jax_fit.{n}" for n in names if not hasattr(jax_fit, n)]


class Timers:
    """The pieces' seconds, in call order, grouped by epoch (each _train_epoch call starts one)."""

    def __init__(self):
        self.epochs = []

    def piece(self, name: str, seconds: float) -> None:
        if self.epochs:  # (the model's metric results are also read after training: not an epoch's)
            self.epochs[-1].setdefault(name, []).append(round(seconds, 5))

    def wrap(self, name: str, fn, block: bool = True):
        import jax

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            result = fn(*args, **kwargs)
            if block:
                jax.block_until_ready(result)
            self.piece(name, time.perf_counter() - started)
            return result

        return timed


def install(timers: Timers) -> None:
    """Timers around jax_fit's pieces and the model's metric results and state sync (on its class, once)."""
    from cifar_dist.training.engines import jax_fit

    missing = missing_pieces(jax_fit)
    if missing:
        raise SystemExit(f"bench_first_epoch: not in the package any more: {', '.join(missing)}")
    jax_fit.epoch_order = timers.wrap("order", jax_fit.epoch_order)
    jax_fit._state = timers.wrap("state_to_devices", jax_fit._state)
    jax_fit.TrainSteps.__call__ = timers.wrap("executions", jax_fit.TrainSteps.__call__)
    train_epoch = jax_fit._train_epoch

    def timed_epoch(model, *args, **kwargs):
        cls = type(model)
        if not getattr(cls, "_bench_first_epoch", False):
            cls.get_metrics_result = timers.wrap("metric_results", cls.get_metrics_result)
            cls.jax_state_sync = timers.wrap("state_back", cls.jax_state_sync, block=False)
            cls._bench_first_epoch = True
        timers.epochs.append({})
        started = time.perf_counter()
        result = train_epoch(model, *args, **kwargs)
        timers.epochs[-1]["train_epoch"] = round(time.perf_counter() - started, 5)
        return result

    jax_fit._train_epoch = timed_epoch


def command(args, run_dir: Path) -> list:
    if args.model == "speedrun":  # the recipe's own model and batch
        model = ["experiment=speedrun"]
    else:
        name = "model=seed_cnn" if args.model == "seed" else "model=tiny_dense"
        model = [name, f"trainer.batch_size={args.batch_size}"]
    argv = ["--config-dir", str(SCRIPTS / "bench_conf")] if args.model == "tiny" else []
    argv += [
        "engine=jax", "data=sample", *model, f"trainer.epochs={args.epochs}",
        "trainer.verbose=0", "trainer.plot=false", "trainer.tensorboard=false", "trainer.save_model=false",
        "trainer.keep_checkpoints=1", f"hydra.run.dir={run_dir}", *args.overrides,
    ]  # fmt: skip
    if args.no_augment:
        argv.append("data.augment.enabled=false")
    return argv


def summary(timers: Timers, run_dir: Path) -> dict:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    images = metrics["run"]["steps_per_epoch"] * metrics["run"]["global_batch_size"]
    epochs = []
    for timed, logged in zip(timers.epochs, metrics["epochs"]):
        epochs.append({"train_s": round(images / logged["images_per_sec"], 5), **timed})
    later = sorted(e["train_s"] for e in epochs[1:]) or [epochs[0]["train_s"]]
    median_later = later[len(later) // 2]
    return {
        "batch_size": metrics["run"]["global_batch_size"],  # the recipe's own with --model speedrun
        "compile_s": metrics.get("compile_s"),
        "first_epoch_s": epochs[0]["train_s"],
        "later_epoch_s": median_later,
        "first_over_later": round(epochs[0]["train_s"] / median_later, 2),
        "epochs": epochs,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(SCRIPTS))  # bench_models (model=tiny_dense) for the ranks' imports
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPTS), os.environ.get("PYTHONPATH")]))
    timers = Timers()
    install(timers)
    run_dir = Path(tempfile.mkdtemp(prefix="bench_first_epoch-")) / "run"
    sys.argv = ["cifar_dist", *command(args, run_dir)]
    from cifar_dist.__main__ import main as cifar_dist_main

    try:
        cifar_dist_main()
    except SystemExit as end:
        if end.code not in (0, None):
            raise
    result = {"model": args.model, **summary(timers, run_dir)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    brief = {k: v for k, v in result.items() if k != "epochs"}
    print(json.dumps(brief))
    return 0


if __name__ == "__main__":
    sys.exit(main())
