"""One sitting: where a run's whole wall time goes, and its fixed cost measured from outside (issue 24).

For the seed model (default config) and ``experiment=speedrun``, each on 1
and 2 ranks (``launcher=mpirun launcher.np=2``), one run's whole command is
cut into phases (interpreter and imports, config compose and checks, launcher
start to ranks up with Horovod's init, data load and pipeline build, model
build, tracing, training steps, validation, checkpoints and logs, final test
plain and TTA, model save, tracking, exit). The phases come from timestamps
that ``benchmarks/phase_probe/`` takes in every process of the run (the package
is not changed; bench_phases.py cuts them) and add up to the whole command's
wall time, measured around the subprocess.

The fixed cost does not trust those clocks: the whole command of an N-epoch
and of a 2N-epoch run, fixed = 2 T(N) - T(2N), epoch cost = (T(2N) - T(N)) / N,
and issue 24's ratio whole command / N epochs' cost = T(N) / (T(2N) - T(N)),
for the seed CNN on 1 rank (5 vs 10 epochs) and the speedrun on 2 ranks (its
configured epochs vs twice as many). Last, the seed port
(``benchmarks/seed_reference.py``) for 25 epochs: the speedrun's whole command
on 2 ranks against it (issue 15's budget: at most half).

    python -m benchmarks breakdown --out outputs/bench/breakdown    # ~10 min on 2 cores
    python -m benchmarks breakdown --smoke --out /tmp/bd             # ~1 min: seed CNN, 1 rank, tiny data

A sitting worth keeping: its tables go into docs/benchmarks-history.md, its JSON into benchmarks/results/
(as issue 24's four sittings did, benchmarks/results/benchmark_breakdown_*.json).

Hold the machine for the whole sitting (nothing else running); ratios are
comparable within one sitting only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
PROBE = SCRIPTS / "phase_probe"
PHASE_LOG_ENV = "CIFAR_DIST_PHASE_LOG"
# breakdown config -> bench_training's variant (the same commands as the other benchmarks)
CONFIGS = {"seed_1": "cifar_dist_1", "seed_2": "cifar_dist_N", "speedrun_1": "speedrun_1", "speedrun_2": "speedrun_N"}
IMPORT_WATCH = (
    "tensorflow",
    "horovod",
    "hydra",
    "omegaconf",
    "mlflow",
    "azure",
    "matplotlib",
    "optuna",
    "numpy",
    "cifar_dist.app",
)


def speedrun_epochs() -> int:
    from omegaconf import OmegaConf

    return int(OmegaConf.load(REPO / "conf" / "experiment" / "speedrun.yaml").trainer.epochs)


def run_config(config: str, epochs: int, data: str, work: Path, log, explicit_epochs: bool) -> dict:
    """One probed run of a config; its whole-command result (bench_training's) with the phase breakdown."""
    from bench_phases import breakdown
    from bench_training import read_result, run_variant, variant_table

    base = variant_table(2)[CONFIGS[config]]
    name = f"{config}_{epochs}ep"
    events_path = work / f"{name}.events.jsonl"
    events_path.unlink(missing_ok=True)
    env = {
        PHASE_LOG_ENV: str(events_path),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PROBE), str(SCRIPTS), str(REPO), os.environ.get("PYTHONPATH", "")])
        ),
    }
    overrides = base.overrides + ([f"trainer.epochs={epochs}"] if explicit_epochs else [])
    v = dataclasses.replace(base, name=name, env=env, overrides=overrides)
    result = run_variant(v, data, epochs, work, 0, log)
    raw = read_result(v, work / f"{name}-rep0") or {}
    result.update(
        config=config,
        epochs_asked=epochs,
        as_configured=not explicit_epochs,
        epochs_run=len(raw.get("epochs", [])),
        test_plain_accuracy=(raw.get("test_plain") or {}).get("accuracy"),
    )
    if result["ok"]:
        events = [json.loads(line) for line in events_path.read_text().splitlines() if line.strip()]
        result["breakdown"] = breakdown(events, result["started_at"], result["ended_at"])
    return result


def run_seed_port(epochs: int, data: str, work: Path, log) -> dict:
    from bench_training import run_variant, variant_table

    v = dataclasses.replace(variant_table(2)["seed"], name=f"seed_port_{epochs}ep")
    return dict(run_variant(v, data, epochs, work, 0, log), config="seed_port", epochs_asked=epochs)


def import_times(log) -> Dict[str, object]:
    """``python -X importtime -c 'import cifar_dist.app'``: cumulative microseconds of the watched top packages."""
    cmd = [sys.executable, "-X", "importtime", "-c", "import cifar_dist.app"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    log(f"[{time.strftime('%H:%M:%S')}] imports: {' '.join(cmd)}")
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    top: Dict[str, int] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
        if cumulative.isdigit() and name in IMPORT_WATCH:
            top[name] = max(top.get(name, 0), int(cumulative))
    return {"command": " ".join(cmd), "wall_s": wall, "ok": proc.returncode == 0, "cumulative_us": top}


def fixed_cost(t_n: Optional[float], t_2n: Optional[float], n: int) -> Optional[dict]:
    """Issue 24's maths from two whole-command times: fixed = 2 T(N) - T(2N), ratio = T(N) / (N epochs' cost)."""
    if not t_n or not t_2n or t_2n <= t_n:
        return None
    epoch = (t_2n - t_n) / n
    return {
        "epochs": n,
        "t_n_s": t_n,
        "t_2n_s": t_2n,
        "fixed_s": 2 * t_n - t_2n,
        "epoch_cost_s": epoch,
        "whole_vs_epochs_cost": t_n / (n * epoch),
    }


def fixed_costs(runs: List[dict], config: str, n: int) -> Dict[str, Optional[dict]]:
    """fixed_cost of a config's N and 2N runs, as measured and without each run's wait as model.fit returns."""
    by_epochs = {r["epochs_asked"]: r for r in runs if r["config"] == config and r.get("ok")}
    if n not in by_epochs or 2 * n not in by_epochs:
        return {"measured": None, "without_fit_return_wait": None}
    short, long = by_epochs[n], by_epochs[2 * n]
    wait = lambda r: (r.get("breakdown") or {}).get("fit_return_wait_s", 0.0)  # noqa: E731
    return {
        "measured": fixed_cost(short["process_wall_s"], long["process_wall_s"], n),
        "without_fit_return_wait": fixed_cost(
            short["process_wall_s"] - wait(short), long["process_wall_s"] - wait(long), n
        ),
        "fit_return_wait_s": [wait(short), wait(long)],
    }


def ratios(runs: List[dict], n_seed: int, n_speed: int) -> Dict[str, object]:
    """Issue 24's goals from the sitting's whole-command times."""
    out: Dict[str, object] = {
        "seed_1_fixed": fixed_costs(runs, "seed_1", n_seed),
        "speedrun_2_fixed": fixed_costs(runs, "speedrun_2", n_speed),
    }
    port = next((r for r in runs if r["config"] == "seed_port" and r.get("ok")), None)
    speed = next(
        (r for r in runs if r["config"] == "speedrun_2" and r.get("ok") and r.get("as_configured")), None
    ) or next(
        (r for r in runs if r["config"] == "speedrun_2" and r.get("ok") and r["epochs_asked"] == speedrun_epochs()),
        None,
    )
    if port and speed:
        out["speedrun_2_vs_seed_port"] = {
            "speedrun_2_s": speed["process_wall_s"],
            "seed_port_s": port["process_wall_s"],
            "speedrun_epochs": speed.get("epochs_run") or speed["epochs_asked"],
            "seed_port_epochs": port["epochs_asked"],
            "ratio": speed["process_wall_s"] / port["process_wall_s"],
            "speedrun_test_accuracy": speed.get("test_accuracy"),
            "speedrun_test_plain_accuracy": speed.get("test_plain_accuracy"),
            "seed_port_test_accuracy": port.get("test_accuracy"),
        }
    return out


def without_local_paths(text: str) -> str:
    """The published files name no path of this machine: the checkout is ".", the interpreter "python"."""
    import re

    for path, name in ((sys.executable, "python"), (str(REPO), "."), (sys.prefix, "<venv>")):
        text = text.replace(path, name)
    return re.sub(r"(?<![\w.])/(?:work|home|tmp|root)/[^\s\"':]*", "<path>", text)


def plan(a: argparse.Namespace) -> List[tuple]:
    """(config, epochs, epochs given on the command line?) in the sitting's order: pairs interleaved."""
    n_speed = a.speedrun_epochs or speedrun_epochs()
    wanted = [c.strip() for c in a.configs.split(",") if c.strip()]
    runs = [
        ("seed_1", a.seed_epochs, True),
        ("speedrun_2", n_speed, bool(a.speedrun_epochs)),
        ("seed_1", 2 * a.seed_epochs, True),
        ("speedrun_2", 2 * n_speed, True),
        ("seed_2", a.seed_epochs, True),
        ("speedrun_1", n_speed, bool(a.speedrun_epochs)),
    ]
    if speedrun_epochs() not in (n_speed, 2 * n_speed):  # the recipe as configured, for issue 15's budget
        runs.append(("speedrun_2", speedrun_epochs(), False))
    return [r for r in runs if r[0] in wanted]


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma list of {', '.join(CONFIGS)} (default all)")
    p.add_argument("--seed-epochs", type=int, default=5, help="N of the seed CNN's N vs 2N runs (default 5)")
    p.add_argument("--speedrun-epochs", type=int, default=0, help="N of the speedrun's runs (default: its config's)")
    p.add_argument("--seed-port-epochs", type=int, default=25, help="epochs of benchmarks/seed_reference.py (0: skip)")
    p.add_argument("--train-images", type=int, default=0, help="only the first N sample training images (0 = all)")
    p.add_argument("--test-images", type=int, default=0, help="only the first N sample test images (0 = all)")
    p.add_argument(
        "--recut",
        action="store_true",
        help="train nothing: cut OUT.json's runs again from the event files in --work, rewrite OUT.json and OUT.md",
    )
    p.add_argument(
        "--smoke", action="store_true", help="seed CNN on 1 rank, 1 vs 2 epochs, 640/256 images, no seed port"
    )
    p.add_argument("--out", required=True, help="writes OUT.json and OUT.md (e.g. outputs/bench/breakdown)")
    p.add_argument("--work", help="run dirs and event files, kept (default outputs/bench/breakdown-<timestamp>)")
    a = p.parse_args(argv)
    if a.smoke:
        a.configs, a.seed_epochs, a.seed_port_epochs = "seed_1", 1, 0
        a.train_images, a.test_images = a.train_images or 640, a.test_images or 256
    unknown = set(c.strip() for c in a.configs.split(",") if c.strip()) - set(CONFIGS)
    if unknown:
        p.error(f"unknown config(s) {', '.join(sorted(unknown))}; choose from {', '.join(CONFIGS)}")
    return a


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(SCRIPTS))
    from bench_phases import missing_functions
    from bench_training import machine, prepare_data, sitting_log, work_dir

    import cifar_dist  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

    missing = missing_functions()  # a renamed function would silently merge its phase into the one before
    if missing:
        sys.exit("bench_breakdown: the phase markers name functions the package does not have: " + "; ".join(missing))

    work = work_dir(a.work or str(REPO / "outputs" / "bench" / time.strftime("breakdown-%Y%m%d-%H%M%S")))
    log = sitting_log(work)
    if a.recut:
        return recut(Path(a.out), work, a, log)
    data = prepare_data(a.train_images, a.test_images, work)
    info = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": "python -m benchmarks breakdown " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "data": data,
    }
    log(f"breakdown: {json.dumps(info)}")
    started = time.time()
    result = {"info": info, "imports": import_times(log), "runs": []}
    for config, epochs, explicit in plan(a):
        result["runs"].append(run_config(config, epochs, data, work, log, explicit))
    if a.seed_port_epochs:
        result["runs"].append(run_seed_port(a.seed_port_epochs, data, work, log))
    info.update(sitting_s=time.time() - started, load_avg_at_end=os.getloadavg())
    return write(result, Path(a.out), a, log)


def write(result: dict, out: Path, a: argparse.Namespace, log) -> int:
    """The sitting's ratios, then OUT.json and OUT.md (no local paths in either)."""
    from bench_breakdown_report import markdown

    result["ratios"] = ratios(result["runs"], a.seed_epochs, a.speedrun_epochs or speedrun_epochs())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(without_local_paths(json.dumps(result, indent=1)))
    text = without_local_paths(markdown(result))
    out.with_suffix(".md").write_text(text)
    log("\n" + text)
    return 0 if all(r.get("ok") for r in result["runs"]) else 1


def recut(out: Path, work: Path, a: argparse.Namespace, log) -> int:
    """OUT.json's runs cut again from their event files (after a change to bench_phases.py); timings unchanged."""
    from bench_phases import breakdown

    result = json.loads(out.with_suffix(".json").read_text())
    for r in result["runs"]:
        events_path = work / f"{r['variant']}.events.jsonl"
        if r.get("ok") and events_path.exists():
            events = [json.loads(line) for line in events_path.read_text().splitlines() if line.strip()]
            r["breakdown"] = breakdown(events, r["started_at"], r["ended_at"])
    return write(result, out, a, log)


if __name__ == "__main__":
    sys.exit(main())
