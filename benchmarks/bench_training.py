"""One command, one sitting: the seed script vs bare Keras vs cifar_dist on 1 and N ranks.

Runs every variant as a subprocess of this one, back to back (and, with
``--reps``, in interleaved rounds), on the same data and batch size (32 per
rank), then writes a table, a JSON file and two plots, with every number also
given as a ratio to the seed reference:

- training images/s: median over the epochs after the first (the first
  includes tracing and warm-up), whole job, training steps only;
- input pipeline only: the seed's ``datagen.flow`` vs cifar_dist's ``train_stream``;
- peak RSS per rank (each process's ru_maxrss);
- time to the seed reference's final test accuracy: cumulative epoch time
  (training + validation, process start-up excluded for every variant) until
  a variant's per-epoch test-set accuracy first reaches it.

    python -m benchmarks training                 # full: 25 seed epochs (~20-30 min on 2 cores)
    python -m benchmarks training --quick         # 5 epochs each (a few minutes)
    python -m benchmarks training --smoke --out /tmp/bench   # seconds-scale data, for tests
    # seed 25 epochs, default, fast, speedrun on 1 and N ranks:
    python -m benchmarks training --variants time_to_accuracy

Variants (``--variants``): seed, bare, cifar_dist_1, cifar_dist_N (N = --ranks,
default the core count), fast (``experiment=fast`` on N ranks), fast_1,
speedrun_1 and speedrun_N (``experiment=speedrun``: the modern model and
recipe; docs/benchmarks.md), keras3_1/keras3_N (the seed CNN in Keras 3 on
Horovod), jax_1/jax_N and speedrun_jax_N (``engine=jax``), and the
option probes mixed_1, mixed_N, fp16_N, jit_1, jit_N (cifar_dist) and bare_jit
(bare Keras under XLA: what jit_compile would buy if Horovod's allreduce could
be compiled on CPU), and the CPU-kernel probes seed_onednn and bare_onednn
(the seed and bare Keras with TF_ENABLE_ONEDNN_OPTS=1) and eigen_1 (cifar_dist
with trainer.onednn=false): how much of cifar_dist's lead is TensorFlow's
kernel choice, on CPUs where TensorFlow leaves oneDNN off by default.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
DEFAULT_VARIANTS = (
    "seed,bare,cifar_dist_1,cifar_dist_N,fast,seed_onednn,bare_onednn,eigen_1,mixed_1,mixed_N,fp16_N,jit_1,bare_jit"
)
ONEDNN_ON = {"TF_ENABLE_ONEDNN_OPTS": "1"}
SEED, BARE = "seed_reference.py", "bench_bare_keras.py"
# --variants time_to_accuracy: the seed reference and cifar_dist's default, fast and speedrun recipes on 1 and N ranks.
TIME_TO_ACCURACY = "seed,cifar_dist_1,cifar_dist_N,fast_1,fast,speedrun_1,speedrun_N"


@dataclass
class Variant:
    """One benchmark run: a command and where its result JSON lands."""

    name: str
    label: str
    ranks: int
    kind: str  # "script" (writes result.json) or "cifar_dist" (writes metrics.json)
    overrides: List[str] = field(default_factory=list)
    timeout_s: float = 3600.0
    env: Dict[str, str] = field(default_factory=dict)  # on top of the harness's environment
    script: str = ""  # kind "script": seed_reference.py or bench_bare_keras.py
    args: List[str] = field(default_factory=list)  # the script's extra arguments
    probe: bool = False  # an option or kernel probe: runs --probe-epochs


def variant_table(ranks: int) -> Dict[str, Variant]:
    n = ranks
    return {
        "seed": Variant("seed", "seed reference (ImageDataGenerator, fit_generator)", 1, "script", script=SEED),
        "bare": Variant("bare", "bare Keras (fit on arrays, no augmentation)", 1, "script", script=BARE),
        "bare_jit": Variant(
            "bare_jit",
            "bare Keras, jit_compile=True (XLA)",
            1,
            "script",
            script=BARE,
            args=["--jit-compile"],
            probe=True,
        ),
        "seed_onednn": Variant(
            "seed_onednn",
            "seed reference, TF_ENABLE_ONEDNN_OPTS=1",
            1,
            "script",
            env=ONEDNN_ON,
            script=SEED,
            probe=True,
        ),
        "bare_onednn": Variant(
            "bare_onednn", "bare Keras, TF_ENABLE_ONEDNN_OPTS=1", 1, "script", env=ONEDNN_ON, script=BARE, probe=True
        ),
        "eigen_1": Variant(
            "eigen_1", "cifar_dist trainer.onednn=false, 1 rank", 1, "cifar_dist", ["trainer.onednn=false"], probe=True
        ),
        "cifar_dist_1": Variant("cifar_dist_1", "cifar_dist, 1 rank", 1, "cifar_dist"),
        "cifar_dist_N": Variant("cifar_dist_N", f"cifar_dist, {n} ranks", n, "cifar_dist"),
        "fast": Variant("fast", f"cifar_dist experiment=fast, {n} ranks", n, "cifar_dist", ["experiment=fast"]),
        "fast_1": Variant("fast_1", "cifar_dist experiment=fast, 1 rank", 1, "cifar_dist", ["experiment=fast"]),
        "speedrun_1": Variant(
            "speedrun_1", "cifar_dist experiment=speedrun, 1 rank", 1, "cifar_dist", ["experiment=speedrun"]
        ),
        "speedrun_N": Variant(
            "speedrun_N", f"cifar_dist experiment=speedrun, {n} ranks", n, "cifar_dist", ["experiment=speedrun"]
        ),
        "mixed_1": Variant(
            "mixed_1", "cifar_dist precision=mixed, 1 rank", 1, "cifar_dist", ["trainer.precision=mixed"], probe=True
        ),
        "mixed_N": Variant(
            "mixed_N",
            f"cifar_dist precision=mixed, {n} ranks",
            n,
            "cifar_dist",
            ["trainer.precision=mixed"],
            probe=True,
        ),
        "fp16_N": Variant(
            "fp16_N",
            f"cifar_dist compression=fp16, {n} ranks",
            n,
            "cifar_dist",
            ["trainer.compression=fp16"],
            probe=True,
        ),
        "jit_1": Variant(
            "jit_1", "cifar_dist jit_compile=true, 1 rank", 1, "cifar_dist", ["trainer.jit_compile=true"], probe=True
        ),
        "jit_N": Variant(
            "jit_N",
            f"cifar_dist jit_compile=true, {n} ranks",
            n,
            "cifar_dist",
            ["trainer.jit_compile=true"],
            probe=True,
        ),
        # The built-in seed CNN in Keras 3 on the Horovod engine (docs/engines.md), beside cifar_dist_1/_N (Keras 2).
        "keras3_1": Variant("keras3_1", "cifar_dist engine.keras=3, 1 rank", 1, "cifar_dist", ["engine.keras=3"]),
        "keras3_N": Variant("keras3_N", f"cifar_dist engine.keras=3, {n} ranks", n, "cifar_dist", ["engine.keras=3"]),
        # The same Keras 3 seed CNN on engine=jax (Keras' DataParallel, no Horovod), and the speedrun recipe on it.
        "jax_1": Variant("jax_1", "cifar_dist engine=jax, 1 process", 1, "cifar_dist", ["engine=jax"]),
        "jax_N": Variant("jax_N", f"cifar_dist engine=jax, {n} processes", n, "cifar_dist", ["engine=jax"]),
        "speedrun_jax_N": Variant(
            "speedrun_jax_N",
            f"cifar_dist experiment=speedrun engine=jax, {n} processes",
            n,
            "cifar_dist",
            ["experiment=speedrun", "engine=jax"],
        ),
    }


def write_subset(source_x, source_y, test_x, test_y, folder: Path) -> Path:
    """A small ``cifar-10-batches-py`` folder (data_batch_1 + test_batch) for the smoke mode."""
    folder.mkdir(parents=True, exist_ok=True)

    def dump(name, x, y):
        rows = x.transpose(0, 3, 1, 2).reshape(len(x), -1)  # NHWC -> the file's R, G, B planes
        with open(folder / name, "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"labels": [int(v) for v in y], b"data": rows}, f, protocol=2)

    dump("data_batch_1", source_x, source_y)
    dump("test_batch", test_x, test_y)
    with open(folder / "batches.meta", "wb") as f:
        names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
        pickle.dump({b"label_names": names, b"num_cases_per_batch": len(source_x), b"num_vis": 3072}, f, protocol=2)
    return folder


def prepare_data(train_images: int, test_images: int, work: Path) -> str:
    """'sample', or a subset folder of it when the smoke mode asks for fewer images."""
    if not train_images and not test_images:
        return "sample"
    from omegaconf import OmegaConf

    from cifar_dist.data import load_dataset

    data = load_dataset(OmegaConf.create({"name": "sample"}))
    n, m = train_images or len(data.x_train), test_images or len(data.x_test)
    folder = write_subset(
        data.x_train[:n], data.y_train[:n], data.x_test[:m], data.y_test[:m], work / "data" / "cifar-10-batches-py"
    )
    return str(folder)


def data_overrides(data: str) -> List[str]:
    return ["data=sample"] if data == "sample" else ["data=cifar10", f"data.path={data}", "data.download=false"]


def command(v: Variant, data: str, epochs: int, run_dir: Path) -> List[str]:
    py = sys.executable
    if v.script == SEED:
        return [
            py,
            str(SCRIPTS / SEED),
            "--dir",
            str(run_dir),
            "--data",
            data,
            "--epochs",
            str(epochs),
            "--metrics",
            str(run_dir / "result.json"),
            "--verbose",
            "0",
        ]
    if v.script == BARE:
        return [
            py,
            str(SCRIPTS / BARE),
            "--data",
            data,
            "--epochs",
            str(epochs),
            "--metrics",
            str(run_dir / "result.json"),
        ] + v.args
    # cifar_dist: the seed's "divide" policy runs ceil(epochs / ranks) epochs per rank, each over all
    # the data, so trainer.epochs = epochs x ranks gives `epochs` epochs on every rank (unless the
    # variant's experiment sets its own schedule).
    cmd = [py, "-m", "cifar_dist", *data_overrides(data), "trainer.verbose=0", f"hydra.run.dir={run_dir}"]
    if not any(o.startswith("experiment=") for o in v.overrides):  # an experiment sets its own schedule
        cmd.append(f"trainer.epochs={epochs * v.ranks}")
    if v.ranks > 1:
        cmd += ["launcher=mpirun", f"launcher.np={v.ranks}"]
    return cmd + v.overrides


def read_result(v: Variant, run_dir: Path) -> Optional[dict]:
    """The variant's result JSON (the script's result.json, cifar_dist's metrics.json); None when unreadable."""
    from cifar_dist.common.results import read_json, read_metrics

    return read_json(run_dir / "result.json") if v.kind == "script" else read_metrics(run_dir)


def normalise(v: Variant, run_dir: Path, wall: float, proc: subprocess.CompletedProcess) -> dict:
    """The variant's result in one shape, whatever wrote it."""
    out = {
        "variant": v.name,
        "label": v.label,
        "ranks": v.ranks,
        "ok": proc.returncode == 0,
        "process_wall_s": wall,
        "returncode": proc.returncode,
    }
    raw = read_result(v, run_dir)
    if proc.returncode != 0 or raw is None:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()
        errors = [line for line in tail if "error" in line.lower()]
        out["error"] = (errors or tail or ["no output"])[-1][:300]
        return out
    out.update(
        epochs=[
            {k: e.get(k) for k in ("epoch", "images_per_sec", "epoch_seconds", "val_accuracy", "accuracy", "loss")}
            for e in raw.get("epochs", [])
        ],
        test_accuracy=(raw.get("test") or {}).get("accuracy"),
        peak_rss_mb_per_rank=raw.get("peak_rss_mb_per_rank"),
        run_wall_s=raw.get("wall_time_s"),
        precision=(raw.get("run") or {}).get("precision"),
        global_batch=(raw.get("run") or {}).get("global_batch_size", raw.get("batch_size")),
    )
    return out


class _Finished:
    """Stands in for a CompletedProcess when results are collected from run dirs afterwards."""

    def __init__(self, ok: bool, error: str = ""):
        self.returncode, self.stdout, self.stderr = (0 if ok else 1), "", error


def logged_runs(work: Path) -> Dict[str, dict]:
    """Whole-command wall time, load average and command of each finished variant, from the benchmark's log."""
    import re

    found, current = {}, None
    log_path = work / "bench.log"
    for line in log_path.read_text().splitlines() if log_path.exists() else []:
        start = re.match(r"^\[[\d:]+\] (\S+) \(rep (\d+)\): (.*)$", line)
        if start:
            current = f"{start.group(1)}-rep{start.group(2)}"
            found[current] = {"command": start.group(3)}
            continue
        end = re.match(r"^    -> .* in (\d+) s, load ([\d.]+) -> ([\d.]+)", line)
        if end and current:
            found[current].update(
                process_wall_s=float(end.group(1)), load_avg_1min=[float(end.group(2)), float(end.group(3))]
            )
    return found


def collect(work: Path, table: Dict[str, Variant]) -> tuple:
    """(results, pipelines) rebuilt from the run dirs of an earlier, possibly interrupted, benchmark."""
    results = []
    logged = logged_runs(work)
    for run_dir in sorted(work.glob("*-rep*")):
        name, rep = run_dir.name.rsplit("-rep", 1)
        if name not in table:
            continue
        v = table[name]
        raw = read_result(v, run_dir)
        done = raw is not None and (v.kind == "script" or raw.get("complete"))
        stderr = (run_dir / "stderr.txt").read_text() if (run_dir / "stderr.txt").exists() else "did not finish"
        r = normalise(v, run_dir, None, _Finished(bool(done), stderr))
        results.append({**r, "rep": int(rep), "command": None, **logged.get(run_dir.name, {})})
    pipelines = (
        [dict(json.loads((work / "pipeline.json").read_text()), ok=True)] if (work / "pipeline.json").exists() else []
    )
    return results, pipelines


def run_variant(v: Variant, data: str, epochs: int, work: Path, rep: int, log) -> dict:
    run_dir = work / f"{v.name}-rep{rep}"
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = command(v, data, epochs, run_dir)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TF_USE_LEGACY_KERAS="1")
    env.pop("CIFAR_DIST_CHILD", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPTS), str(REPO), env.get("PYTHONPATH", "")]))
    env.update(v.env)
    shown = shlex.join([f"{k}={val}" for k, val in v.env.items()] + cmd)
    log(f"[{time.strftime('%H:%M:%S')}] {v.name} (rep {rep}): {shown}")
    load_before = os.getloadavg()[0]
    started_at, start = time.time(), time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=run_dir, env=env, capture_output=True, text=True, timeout=v.timeout_s, stdin=subprocess.DEVNULL
    )
    wall = time.perf_counter() - start
    (run_dir / "stdout.txt").write_text(proc.stdout)
    (run_dir / "stderr.txt").write_text(proc.stderr)
    result = normalise(v, run_dir, wall, proc)
    result["command"] = shown
    result["started_at"], result["ended_at"] = (
        started_at,
        started_at + wall,
    )  # epoch seconds: for benchmarks/bench_breakdown.py
    # The 1-minute load average around the run: other users of the machine show up here.
    result["load_avg_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    log(
        f"    -> {'ok' if result['ok'] else 'FAILED: ' + result.get('error', '')} in {wall:.0f} s, "
        f"load {result['load_avg_1min'][0]:.1f} -> {result['load_avg_1min'][1]:.1f}"
    )
    return result


def run_pipeline(data: str, batches: int, work: Path, log) -> dict:
    out = work / "pipeline.json"
    cmd = [
        sys.executable,
        str(SCRIPTS / "bench_pipeline.py"),
        "--data",
        data,
        "--batches",
        str(batches),
        "--metrics",
        str(out),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPTS), str(REPO), env.get("PYTHONPATH", "")]))
    log(f"[{time.strftime('%H:%M:%S')}] pipeline: {shlex.join(cmd)}")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        return {"ok": False, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return dict(json.loads(out.read_text()), ok=True, command=shlex.join(cmd))


def machine() -> dict:
    import tensorflow as tf  # noqa: F401  (version only)

    from cifar_dist.training.process.hardware import cpu_flags

    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    flags = cpu_flags()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "avx512_bf16": "avx512_bf16" in flags,
        "load_avg_at_start": os.getloadavg(),
    }


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    p.add_argument("--quick", action="store_true", help="5 epochs per variant, fewer pipeline batches")
    p.add_argument("--smoke", action="store_true", help="2 epochs on 640/256 images, seed/bare/cifar_dist_1 only")
    p.add_argument(
        "--seed-epochs", type=int, help="epochs of the seed reference (default 25; sets the accuracy target)"
    )
    p.add_argument("--epochs", type=int, help="epochs per rank of the throughput variants (default: --seed-epochs)")
    p.add_argument(
        "--probe-epochs",
        type=int,
        help="epochs per rank of the option and kernel probes mixed_*, fp16_*, jit_*, *_onednn, eigen_1 (default 4)",
    )
    p.add_argument("--reps", type=int, default=1, help="rounds of all variants, interleaved; medians are over rounds")
    p.add_argument("--ranks", type=int, default=os.cpu_count() or 1, help="N of the N-rank variants (default: cores)")
    p.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"comma list (default {DEFAULT_VARIANTS})")
    p.add_argument("--pipeline-batches", type=int, help="batches timed by the input-pipeline benchmark (default 400)")
    p.add_argument("--train-images", type=int, default=0, help="use only the first N sample training images (0 = all)")
    p.add_argument("--test-images", type=int, default=0, help="use only the first N sample test images (0 = all)")
    p.add_argument(
        "--out",
        default=str(REPO / "benchmarks" / "results"),
        help="where the table, JSON and plots go (default benchmarks/results/)",
    )
    p.add_argument("--work", help="run dirs, kept (default outputs/bench/<timestamp>, git-ignored)")
    p.add_argument(
        "--collect",
        action="store_true",
        help="train nothing: rebuild the table and plots from the run dirs in --work (e.g. after an interruption)",
    )
    a = p.parse_args(argv)
    if a.smoke:
        a.seed_epochs = a.seed_epochs or 2
        a.train_images = a.train_images or 640
        a.test_images = a.test_images or 256
        a.pipeline_batches = a.pipeline_batches or 20
        a.probe_epochs = a.probe_epochs or 2
        if a.variants == DEFAULT_VARIANTS:
            a.variants = "seed,bare,cifar_dist_1"
    elif a.quick:
        a.seed_epochs = a.seed_epochs or 5
        a.pipeline_batches = a.pipeline_batches or 200
        a.probe_epochs = a.probe_epochs or 3
    a.seed_epochs = a.seed_epochs or 25
    a.epochs = a.epochs or a.seed_epochs
    a.pipeline_batches = a.pipeline_batches or 400
    a.probe_epochs = a.probe_epochs or 4
    return a


def work_dir(work: Optional[str]) -> Path:
    """Where the run dirs go, absolute: every variant runs with its own run dir as the working directory."""
    return (Path(work) if work else REPO / "outputs" / "bench" / time.strftime("%Y%m%d-%H%M%S")).resolve()


def sitting_log(work: Path):
    """A ``log(msg)`` that prints and appends to ``work/bench.log`` (made if missing)."""
    work.mkdir(parents=True, exist_ok=True)
    log_file = (work / "bench.log").open("a")

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_file.write(msg + "\n")
        log_file.flush()

    return log


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    sys.path.insert(0, str(REPO))
    from bench_report import summarise, write_outputs

    import cifar_dist  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

    out = Path(a.out)
    work = work_dir(a.work)
    log = sitting_log(work)

    table = variant_table(a.ranks)
    variants = TIME_TO_ACCURACY if a.variants == "time_to_accuracy" else a.variants
    names = [n.strip() for n in variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown:
        print(
            f"bench_training: unknown variant(s) {', '.join(unknown)}; choose from {', '.join(table)}", file=sys.stderr
        )
        return 2
    if a.collect:
        results, pipelines = collect(work, table)
        info = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(work.stat().st_mtime)),
            "argv": sys.argv[1:],
            "machine": machine(),
            "seed_epochs": a.seed_epochs,
            "epochs": a.epochs,
            "reps": a.reps,
            "data": "sample",
            "collected_from": str(work),
        }
        summary = summarise(results, pipelines, info)
        log("\n" + summary["markdown"])
        log("wrote " + ", ".join(str(p) for p in write_outputs(summary, out)))
        return 0
    data = prepare_data(a.train_images, a.test_images, work)
    info = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "argv": sys.argv[1:],
        "machine": machine(),
        "seed_epochs": a.seed_epochs,
        "epochs": a.epochs,
        "reps": a.reps,
        "data": data,
    }
    log(f"benchmark: {json.dumps(info)}")

    results: List[dict] = []
    pipelines: List[dict] = []
    started = time.time()
    for rep in range(a.reps):
        pipelines.append(run_pipeline(data, a.pipeline_batches, work, log))
        for name in names:
            v = table[name]
            if v.probe:
                epochs = a.probe_epochs
            elif name in ("seed", "cifar_dist_1") and rep == 0:
                epochs = a.seed_epochs  # the accuracy-vs-time curves
            else:
                epochs = a.epochs
            results.append(dict(run_variant(v, data, epochs, work, rep, log), rep=rep))
    info["bench_wall_s"] = time.time() - started
    summary = summarise(results, pipelines, info)
    paths = write_outputs(summary, out)
    log("\n" + summary["markdown"])
    log("wrote " + ", ".join(str(p) for p in paths))
    return 0 if all(r["ok"] for r in results if r["variant"] in ("seed", "bare", "cifar_dist_1")) else 1


if __name__ == "__main__":
    sys.exit(main())
