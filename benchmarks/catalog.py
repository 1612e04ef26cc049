"""Every benchmark ``python -m benchmarks`` knows: its name, its script, what it measures, its command and the doc
table it feeds. The scripts not named here are the parts the named ones share or run (``HELPERS``)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str  # in benchmarks/, or the repository's path of a shell script
    measures: str
    command: str  # an example, arguments included
    feeds: str  # the doc page and the start of the heading of the section its results are in: "docs/x.md#Heading"

    @property
    def path(self) -> Path:
        return REPO / self.script if "/" in self.script else HERE / self.script


BENCHMARKS: Tuple[Benchmark, ...] = (
    Benchmark(
        "gpu",
        "scripts/gpu_check.sh",
        "engine=jax on one GPU against bare Keras 3 on JAX and PyTorch, with the model-build and first-epoch "
        "probes below: every run of the lent GPU machine's check, sized for its 15 minutes (ONLY= picks some)",
        "bash scripts/gpu_check.sh /tmp/gpu_check",
        "docs/benchmarks.md#One NVIDIA H200",
    ),
    Benchmark(
        "device",
        "bench_device.py",
        "engine=jax against bare Keras 3 on JAX (and PyTorch, on a GPU) on one device: images/s, compile time, "
        "peak memory; --phases cuts the run's wall time into phases",
        "python -m benchmarks device --variant cifar_dist --model seed --batch-size 32 --epochs 8 --out c.json",
        "docs/benchmarks.md#engine=jax on one device",
    ),
    Benchmark(
        "layouts",
        "bench_layouts.py",
        "engine=jax's layouts of ranks on one machine, P processes of M devices (a rank is a device): images/s and "
        "wall time of each; on a CPU, what splitting it into XLA's devices costs",
        "python -m benchmarks layouts --layouts 1x1 1x2 2x1 --epochs 3 --out layouts.json",
        "docs/benchmarks.md#Ranks as devices on a CPU",
    ),
    Benchmark(
        "fixed-cost",
        "bench_fixed_cost.py",
        "a short engine=jax run's wall time outside its epochs (start-up, final test, writes, exit), warm "
        "compilation cache, interpreters alternated (before/after a change)",
        "python -m benchmarks fixed-cost --variant after=.venv-jax/bin/python --reps 5 --out fixed_cost.json",
        "docs/benchmarks.md#The fixed cost of a short run",
    ),
    Benchmark(
        "cifar10-sized",
        "cifar10_sized.py",
        "no measurement: 50,000 training and 10,000 test images in CIFAR-10's own format, made from the packaged "
        "sample by shifts and flips, for measuring at CIFAR-10's scale without the network",
        "python -m benchmarks cifar10-sized /tmp/cifar10",
        "docs/benchmarks.md#CIFAR-10 at airbench's scale",
    ),
    Benchmark(
        "airbench",
        "bench_airbench.py",
        "airbench94 itself (its net, training loop and torch.compile, from its own file, never committed) on the "
        "images cifar_dist trains on: images/s of its steady epochs, wall time, precision (CUDA only)",
        "python -m benchmarks airbench --data /tmp/cifar10 --out airbench.json",
        "docs/benchmarks.md#CIFAR-10 at airbench's scale",
    ),
    Benchmark(
        "device-report",
        "bench_device_report.py",
        "the table of device's JSON results, each row against bare Keras on JAX of the same model and batch",
        "python -m benchmarks device-report /tmp/gpu_check/*.json",
        "docs/benchmarks.md#One NVIDIA H200",
    ),
    Benchmark(
        "model-build",
        "bench_model_build.py",
        "engine=jax's first model build cut into JAX's start, Keras' import, the probe build and the real one, the "
        "initializers on the device or on the host (--where), JAX's start beside Keras' import (--start overlap)",
        "python -m benchmarks model-build --where host --out build.json",
        "docs/benchmarks.md#The speedrun on the H200",
    ),
    Benchmark(
        "first-epoch",
        "bench_first_epoch.py",
        "engine=jax's first epoch cut into its pieces (order, state to the devices, each execution, state back) "
        "against a later epoch's",
        "python -m benchmarks first-epoch --model tiny --out first.json",
        "docs/benchmarks.md#The first epoch against a later one",
    ),
    Benchmark(
        "stacks",
        "bench_stacks.py",
        "each stack's python -m cifar_dist side by side, one variant per engine and process count: training "
        "images/s, peak RSS, test accuracy, ranks in sync",
        "python -m benchmarks stacks --stack horovod=.venv/bin/python --stack current=.venv-current/bin/python",
        "docs/benchmarks.md#The stacks side by side",
    ),
    Benchmark(
        "allreduce",
        "bench_allreduce.py",
        "engine=tensorflow's gradient averaging, MPI (mpi4py) against TensorFlow's collective ops: images/s of 2 "
        "processes and one allreduce's time",
        "python -m benchmarks allreduce --python .venv-current/bin/python --steps 120 --reps 2",
        "docs/benchmarks.md#Several processes without Horovod",
    ),
    Benchmark(
        "run-cost",
        "bench_run_cost.py",
        "the CPU-seconds and wall time of one short command, every process it starts included (what an "
        "end-to-end test costs)",
        "python -m benchmarks run-cost --reps 6 --label now --out /tmp/cost.json",
        "docs/benchmarks-history.md#2026-11-27 (07:10-07:20 UTC): the cost of a short run",
    ),
    Benchmark(
        "collector",
        "bench_collector.py",
        "the CPU-seconds of one process that imports the framework and exits, by how the garbage collector is handled",
        "python -m benchmarks collector --reps 5",
        "docs/benchmarks.md#The cost of a short run",
    ),
    Benchmark(
        "scaling",
        "bench_scaling.py",
        "N ranks (a core share each) against 1 rank using every core, the same per-rank batch",
        "python -m benchmarks scaling --rounds 3",
        "docs/scaling.md#Scaling on one machine",
    ),
    Benchmark(
        "keras3-backends",
        "bench_keras3_backends.py",
        "the seed CNN's step in bare Keras 3 on each backend (TensorFlow's kernels, XLA through TensorFlow, JAX): "
        "what engine=jax's CPU speed rests on",
        "python -m benchmarks keras3-backends --backend jax --epochs 4",
        "docs/engines.md#What it costs",
    ),
    Benchmark(
        "training",
        "bench_training.py",
        "cifar_dist against the seed script (seed_reference.py), bare Keras (bench_bare_keras.py) and option "
        "probes: images/s, input pipeline alone, peak memory, time to the seed's accuracy; writes results/",
        "python -m benchmarks training --quick",
        "docs/benchmarks-history.md#Results",
    ),
    Benchmark(
        "training-report",
        "bench_report.py",
        "training's table, JSON and plots drawn again from its saved results, without training",
        "python -m benchmarks training-report benchmarks/results/benchmark_results.json",
        "docs/benchmarks-history.md#Results",
    ),
    Benchmark(
        "pipeline",
        "bench_pipeline.py",
        "the input pipelines alone, no model: the seed's ImageDataGenerator (one thread, 4 workers) against "
        "cifar_dist's tf.data stream (training runs it)",
        "python -m benchmarks pipeline --data sample --batches 300 --metrics /tmp/pipeline.json",
        "docs/benchmarks-history.md#Results",
    ),
    Benchmark(
        "breakdown",
        "bench_breakdown.py",
        "one run's whole command cut into phases (phase_probe/), and its fixed cost from an N- and a 2N-epoch run",
        "python -m benchmarks breakdown --smoke --out /tmp/breakdown",
        "docs/benchmarks-history.md#The fixed cost of a run",
    ),
    Benchmark(
        "breakdown-report",
        "bench_breakdown_report.py",
        "breakdown's Markdown tables from its JSON",
        "python -m benchmarks breakdown-report benchmarks/results/benchmark_breakdown_after.json",
        "docs/benchmarks-history.md#The fixed cost of a run",
    ),
)

# What the benchmarks share or run, not run alone: the stand-alone variants' loader and clock, the seed script and
# bare Keras (training's variants), the phases cut from phase_probe/'s events, the benchmarks' own model options.
HELPERS = ("bench_common.py", "seed_reference.py", "bench_bare_keras.py", "bench_phases.py", "bench_models.py")


def by_name(name: str) -> Optional[Benchmark]:
    return next((b for b in BENCHMARKS if b.name == name), None)


def listing() -> str:
    """Each benchmark: its name and what it measures, its command, the doc table its results are."""
    blocks = []
    for b in BENCHMARKS:
        page, _, section = b.feeds.partition("#")
        measures = textwrap.fill(b.measures, 116, initial_indent="    ", subsequent_indent="    ")
        blocks.append(f'{b.name}  ({b.script})\n{measures}\n    $ {b.command}\n    -> {page}, section "{section}"')
    return "python -m benchmarks NAME [ARGS...]; NAME one of:\n\n" + "\n\n".join(blocks)
