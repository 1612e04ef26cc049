"""engine=jax against its references on one device (a GPU, or this CPU): images/s, compile time, peak memory.

One variant per process, so that each starts cold and its peak memory is its own:

* ``keras``: bare Keras 3 on JAX, ``model.fit`` on in-memory float arrays (no
  augmentation, Keras' default one step per dispatch): the floor of framework
  overhead that issue 46 compares cifar_dist with;
* ``torch``: the same net in PyTorch, eager, the images on the device, one
  permutation per epoch (no augmentation): a second reference (GPU only);
* ``cifar_dist``: ``python -m cifar_dist engine=jax`` with the same model,
  optimizer and batch, its metrics read back from ``metrics.json``
  (augmentation as configured: the seed's by default; ``--no-augment`` turns it off).

Models: ``seed`` (the tutorial's CNN, 1,250,858 parameters) and ``tiny``
(Flatten + Dense: a step that is almost all overhead, as a GPU's step is).
Data: the packaged sample (4,068 training images), as in issue 46, or (``--data``, cifar_dist only) a CIFAR-10
folder such as the 50,000 images ``python -m benchmarks cifar10-sized`` makes. Printed and
written (``--out``): the median images/s of the epochs after the first, the
first epoch's seconds (compiling) against a later one's, the process's peak
RSS and the device's peak memory. No network is needed. ``--phases`` (cifar_dist
only) also cuts the run's wall time into phases (``benchmarks/phase_probe/``, the
cut of ``bench_phases.py``): ``phases`` and ``categories`` in the JSON.

    python -m benchmarks device --variant keras --model seed --batch-size 32 --epochs 8 --out k.json
    python -m benchmarks device --variant cifar_dist --model seed --batch-size 32 --epochs 8 --out c.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
CONF = SCRIPTS / "bench_conf"  # the tiny model's option


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def sample_arrays():
    """(x_train uint8 NHWC, y_train int, x_test, y_test) of the packaged sample, read as cifar_dist reads it."""
    try:
        import cifar_dist  # noqa: F401  (installed, or carried to a GPU machine as a wheel)
    except ImportError:
        sys.path.insert(0, str(ROOT))
    from omegaconf import OmegaConf

    from cifar_dist.data import load_dataset

    data = load_dataset(OmegaConf.create({"name": "sample"}))
    return data.x_train, data.y_train, data.x_test, data.y_test


def summary(epoch_seconds, images_per_epoch: int, **extra) -> dict:
    later = epoch_seconds[1:] or epoch_seconds
    return {
        "images_per_sec": images_per_epoch / statistics.median(later),
        "first_epoch_s": epoch_seconds[0],
        "later_epoch_s": statistics.median(later),
        "epoch_seconds": epoch_seconds,
        "peak_rss_mb": peak_rss_mb(),
        **extra,
    }


def keras_model(name: str, keras):
    if name == "tiny":
        sys.path.insert(0, str(SCRIPTS))
        from bench_models import tiny_dense

        return tiny_dense(10)
    from cifar_dist.models.seed_cnn import build

    return build(num_classes=10, keras=keras)


def run_keras(args) -> dict:
    os.environ["KERAS_BACKEND"] = "jax"
    x, y, _, _ = sample_arrays()
    import jax
    import keras
    import numpy as np

    from cifar_dist.training.recipe.keras3_optimizers import RMSprop

    model = keras_model(args.model, keras)
    model.compile(optimizer=RMSprop(learning_rate=1e-4, rho=0.9, epsilon=1e-7), loss="categorical_crossentropy")
    images, labels = x.astype("float32") / 255.0, np.eye(10, dtype="float32")[y]
    seconds = []

    class Clock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds.append(time.perf_counter() - self.start)

    model.fit(images, labels, batch_size=args.batch_size, epochs=args.epochs, verbose=0, callbacks=[Clock()])
    # (Keras trains the last short batch too: an epoch is every image)
    return summary(seconds, len(images), device_peak_mb=device_peak_mb(jax), jax=jax.__version__)


def device_peak_mb(jax):
    stats = jax.local_devices()[0].memory_stats() or {}
    return stats["peak_bytes_in_use"] / 2**20 if "peak_bytes_in_use" in stats else None


def run_torch(args) -> dict:
    import torch
    from torch import nn

    x, y, _, _ = sample_arrays()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = torch.tensor(x, device=device).permute(0, 3, 1, 2).float() / 255.0
    labels = torch.tensor(y, device=device)
    if args.model == "tiny":
        model = nn.Sequential(nn.Flatten(), nn.Linear(3072, 10))
    else:
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Dropout(0.25), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(64 * 6 * 6, 512), nn.ReLU(),
            nn.Dropout(0.5), nn.Linear(512, 10),
        )  # fmt: skip
    model = model.to(device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-4, alpha=0.9, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    steps, seconds = len(images) // args.batch_size, []
    for _ in range(args.epochs):
        start = time.perf_counter()
        order = torch.randperm(len(images), device=device)
        for step in range(steps):
            rows = order[step * args.batch_size : (step + 1) * args.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(images[rows]), labels[rows]).backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
    return summary(seconds, steps * args.batch_size, device_peak_mb=peak, torch=torch.__version__)


def run_cifar_dist(args) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix="bench_device-"))
    flags = ["--config-dir", str(CONF)] if args.model == "tiny" and not args.speedrun else []  # before overrides
    if args.speedrun:  # the recipe's own model, batch and epochs
        recipe = ["experiment=speedrun"]
    else:
        model = "model=seed_cnn" if args.model == "seed" else "model=tiny_dense"
        recipe = [model, f"trainer.epochs={args.epochs}", f"trainer.batch_size={args.batch_size}"]
    data = ["data=cifar10", f"data.path={args.data}", "data.download=false"] if args.data else ["data=sample"]
    command = [
        sys.executable, "-m", "cifar_dist", *flags, "engine=jax", *data, *recipe, "trainer.verbose=0",
        "trainer.plot=false", "trainer.tensorboard=false", "trainer.save_model=false", "trainer.keep_checkpoints=1",
        f"hydra.run.dir={run_dir / 'run'}", *args.overrides,
    ]  # fmt: skip
    if args.no_augment:
        command.append("data.augment.enabled=false")
    probe = [str(SCRIPTS / "phase_probe")] if args.phases else []  # a sitecustomize: timestamps, nothing changed
    path = os.pathsep.join(filter(None, [*probe, str(SCRIPTS), os.environ.get("PYTHONPATH")]))
    events = run_dir / "phase-events.jsonl"
    env = {**os.environ, "PYTHONPATH": path, **({"CIFAR_DIST_PHASE_LOG": str(events)} if args.phases else {})}
    started, started_at = time.perf_counter(), time.time()  # from another folder: the installed cifar_dist runs
    subprocess.run(command, check=True, cwd=str(run_dir), env=env)
    wall, ended_at = time.perf_counter() - started, time.time()
    metrics = json.loads((run_dir / "run" / "metrics.json").read_text())
    rates = [e["images_per_sec"] for e in metrics["epochs"]]
    images = metrics["run"]["steps_per_epoch"] * metrics["run"]["global_batch_size"]  # an epoch's (per process)
    later = statistics.median(rates[1:] or rates)
    return {
        "batch_size": metrics["run"]["global_batch_size"],  # the recipe's own with --speedrun
        "images_per_sec": later,
        "first_epoch_s": images / rates[0],
        "later_epoch_s": images / later,
        "compile_s": metrics.get("compile_s"),
        "wall_s": wall,
        "epochs": len(rates),
        "test_accuracy": metrics["test"]["accuracy"],
        "peak_rss_mb": max(metrics["peak_rss_mb_per_rank"]),
        "device_peak_mb": max(metrics.get("peak_device_mb_per_rank") or [None], key=lambda v: v or 0),
        "run_dir": str(run_dir / "run"),
        **(phases(events, started_at, ended_at) if args.phases else {}),
    }


def phases(events: Path, started_at: float, ended_at: float) -> dict:
    """The run's wall time cut into consecutive phases (bench_phases.breakdown), seconds rounded to the ms."""
    from bench_phases import breakdown

    lines = events.read_text().splitlines()
    cut = breakdown([json.loads(line) for line in lines if line.strip()], started_at, ended_at)
    return {
        "phases": [{**p, "seconds": round(p["seconds"], 3)} for p in cut["phases"]],
        "categories": {name: round(seconds, 3) for name, seconds in cut["categories"].items()},
    }


VARIANTS = {"keras": run_keras, "torch": run_torch, "cifar_dist": run_cifar_dist}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    parser.add_argument("--model", choices=("seed", "tiny"), default="seed")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--no-augment", action="store_true", help="cifar_dist: data.augment.enabled=false")
    parser.add_argument("--speedrun", action="store_true", help="cifar_dist: experiment=speedrun (its own epochs)")
    parser.add_argument("--phases", action="store_true", help="cifar_dist: the wall time cut into phases too")
    parser.add_argument(
        "--data", type=Path, help="cifar_dist: a CIFAR-10 folder (data=cifar10 data.path=...) instead of the sample"
    )
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("overrides", nargs="*", help="cifar_dist: more overrides (trainer.execution=steps ...)")
    args = parser.parse_args()
    result = {
        "variant": args.variant,
        "model": "speedrun" if args.speedrun else args.model,
        "batch_size": args.batch_size,
        "augment": args.variant == "cifar_dist" and not args.no_augment,
        "overrides": args.overrides,
        **VARIANTS[args.variant](args),
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("epoch_seconds", "phases")}))


if __name__ == "__main__":
    main()
