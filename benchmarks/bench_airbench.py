"""airbench94 itself on the images cifar_dist trains on: the reference engine=jax's speedrun is held to on a GPU.

Runs the net, training loop and ``torch.compile`` of Keller Jordan's ``airbench94_muon.py``
(github.com/KellerJordan/cifar10-airbench: 94 % on CIFAR-10 in 2.59 s on an A100) from its own file, which is
not part of this repository: put it at ``benchmarks/external/airbench94_muon.py`` (git-ignored; the device tool
carries it: ``carry=["benchmarks/external"]``). Its data loader reads ``cifar10/train.pt`` and ``test.pt``
(uint8 NHWC tensors), which this writes from a CIFAR-10 folder read by cifar_dist's own loader (``--data``: the
set ``python -m benchmarks cifar10-sized`` makes), so both train on the same images. One warm-up run compiles
(airbench's own first run, on random labels), then ``--runs`` measured runs; each epoch's training time is
airbench's own CUDA-event timer (its ``time_seconds``, cumulative per epoch). Reported (``--out``): the median
images/s of the steady epochs (after the first), the first epoch's, the run's wall time, its test accuracy
(with TTA, airbench's ``tta_val_acc``), the compile mode, and the precision it trains in (float16 weights and
activations, BatchNorm in float32: airbench's own). Needs CUDA; where torchvision is missing (a JAX GPU image),
a stand-in of the one part airbench uses with data on disk (``transforms.Normalize``) is put in its place.

    python -m benchmarks airbench --data /tmp/cifar10 --out airbench.json [--compile-mode max-autotune] [--runs 1]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SCRIPT = HERE / "external" / "airbench94_muon.py"
COLUMNS = ("run", "epoch", "train_acc", "val_acc", "tta_val_acc", "time_seconds")  # airbench's printed table


def table_rows(printed: str) -> list:
    """airbench's printed table as dicts of its columns ('' where a cell is empty), data rows only."""
    rows = []
    for line in printed.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(COLUMNS) and cells[0] != "run" and not line.startswith("-"):
            rows.append(dict(zip(COLUMNS, cells)))
    return rows


def epoch_seconds(rows: list) -> list:
    """Each training epoch's seconds from airbench's cumulative ``time_seconds`` (the final "eval" row left out)."""
    totals = [float(r["time_seconds"]) for r in rows if r["epoch"] not in ("", "eval")]
    return [b - a for a, b in zip([0.0, *totals], totals)]


def summary(rows: list, images_per_epoch: int, wall_s: float) -> dict:
    seconds = epoch_seconds(rows)
    rates = [images_per_epoch / s for s in seconds]
    final = [r for r in rows if r["epoch"] == "eval"]
    return {
        "images_per_sec": statistics.median(rates[1:] or rates),
        "first_epoch_s": seconds[0],
        "later_epoch_s": statistics.median(seconds[1:] or seconds),
        "epochs": len(seconds),
        "train_s": sum(seconds),
        "wall_s": wall_s,
        "test_accuracy_tta": float(final[-1]["tta_val_acc"]) if final else None,
    }


def torchvision_stand_in() -> types.ModuleType:
    """What airbench uses of torchvision when its data is on disk already: ``transforms.Normalize``."""
    import torch

    class Normalize:
        def __init__(self, mean, std):
            self.mean, self.std = torch.tensor(mean), torch.tensor(std)

        def __call__(self, images):  # (N, C, H, W), on any device and dtype
            mean, std = (t.to(images.device, images.dtype).view(1, -1, 1, 1) for t in (self.mean, self.std))
            return (images - mean) / std

    module = types.ModuleType("torchvision")
    module.transforms = types.SimpleNamespace(Normalize=Normalize)
    module.datasets = types.SimpleNamespace()
    return module


def write_airbench_data(data_path: Path, folder: Path) -> tuple:
    """``folder/cifar10/{train,test}.pt`` as airbench's loader reads them, from the CIFAR-10 folder at
    ``data_path`` (cifar_dist's reader); (training images, test images)."""
    import torch
    from omegaconf import OmegaConf

    from cifar_dist.data import load_dataset

    data = load_dataset(OmegaConf.create({"name": "cifar10", "path": str(data_path), "download": False}))
    (folder / "cifar10").mkdir(parents=True, exist_ok=True)
    for split, images, labels in (("train", data.x_train, data.y_train), ("test", data.x_test, data.y_test)):
        record = {"images": torch.tensor(images), "labels": torch.tensor(labels), "classes": list(data.class_names)}
        torch.save(record, folder / "cifar10" / f"{split}.pt")
    return len(data.x_train), len(data.x_test)


def load_airbench(script: Path):
    if not script.is_file():
        sys.exit(
            f"bench_airbench: {script} is missing: fetch KellerJordan/cifar10-airbench and copy its "
            "airbench94_muon.py there (it stays out of the repository)"
        )
    if importlib.util.find_spec("torchvision") is None:
        sys.modules["torchvision"] = torchvision_stand_in()
        sys.modules["torchvision.transforms"] = sys.modules["torchvision"].transforms
    spec = importlib.util.spec_from_file_location("airbench94", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args) -> dict:
    if importlib.util.find_spec("torch") is None:
        sys.exit("bench_airbench: airbench needs PyTorch with CUDA, and PyTorch is not installed here")
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench_airbench: airbench needs CUDA (torch.cuda.Event, .cuda()); this machine has no GPU")
    airbench = load_airbench(args.script)
    with tempfile.TemporaryDirectory(prefix="airbench-") as scratch:
        train_images, _ = write_airbench_data(args.data, Path(scratch))
        os.chdir(scratch)  # its loader reads ./cifar10/
        model = airbench.CifarNet().cuda().to(memory_format=torch.channels_last)
        started = time.perf_counter()
        model.compile(mode=args.compile_mode)
        with contextlib.redirect_stdout(io.StringIO()):
            airbench.main("warmup", model)  # airbench's own warm-up: compiles, on random labels
        warmup_s = time.perf_counter() - started
        results = []
        for run_index in range(args.runs):
            printed = io.StringIO()
            started = time.perf_counter()
            with contextlib.redirect_stdout(printed):
                airbench.main(run_index, model)
            wall = time.perf_counter() - started
            batch = 2000  # airbench94_muon's main() trains batches of 2000, full batches only
            results.append(summary(table_rows(printed.getvalue()), train_images // batch * batch, wall))
    best = min(results, key=lambda r: r["train_s"])
    return {
        "variant": "airbench94_muon",
        "script": str(args.script),
        "batch_size": 2000,
        "precision": "float16 weights and activations, BatchNorm float32 (airbench's own)",
        "compile_mode": args.compile_mode,
        "warmup_s": warmup_s,
        "torch": torch.__version__,
        "torchvision": "stand-in"
        if isinstance(sys.modules.get("torchvision"), types.ModuleType)
        and not hasattr(sys.modules["torchvision"], "__file__")
        else "installed",
        "runs": results,
        **best,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a CIFAR-10 folder (data.path of data=cifar10)")
    parser.add_argument("--script", type=Path, default=DEFAULT_SCRIPT, help="airbench94_muon.py")
    parser.add_argument("--compile-mode", default="max-autotune", help="torch.compile's mode (airbench's own)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    args.data, args.script, out = args.data.resolve(), args.script.resolve(), Path(args.out).resolve()
    result = run(args)  # (from inside its scratch folder, as airbench's loader needs)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
