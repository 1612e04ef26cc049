"""A run's whole wall time cut into phases, from the events phase_probe/ wrote (pure functions, no TensorFlow).

``breakdown(events, cmd_start, cmd_end)`` turns one run's events (the
launching process's and, with several ranks, rank 0's) into consecutive
phases that add up to the whole command, each under one of ``CATEGORIES``
(the parts issue 24 asks for). The epochs between Keras' ``on_train_begin``
and ``on_train_end`` are cut by ``fit_phases``: tracing (the first epoch's
training and validation beyond a steady epoch's), training steps,
validation, epoch callbacks (checkpoints separately) and Keras' own time
between them.

The markers name the package's functions (several private to the trainer) as
strings: ``missing_functions()`` reads the package's source and names every
one that no longer exists, so a rename fails the bench (and
tests/project/test_bench_names.py) instead of silently merging its phase.
"""

from __future__ import annotations

import ast
import importlib.util
import statistics
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

CATEGORIES = (
    "interpreter and imports",
    "config compose and checks",
    "launcher start to ranks up (Horovod init)",
    "data load and pipeline build",
    "model build and weights broadcast",
    "tracing/compilation (first epoch)",
    "training steps",
    "validation (per epoch)",
    "checkpoints and logs",
    "Keras fit overhead",
    "final test (plain and TTA)",
    "model save",
    "tracking",
    "exit",
)
TRAINER = "cifar_dist.training.trainer."
EXACT_TEST = "cifar_dist.training.exact_test."
RECORDS = "cifar_dist.training.run_records."
RECIPE = "cifar_dist.training.recipe.hooks."
APP = "cifar_dist.app."

# (phase that ends at the marker, category, process: "L" launching / "R" rank 0, the marker's event)
START = [
    ("interpreter start-up", "interpreter and imports", "L", "interpreter_ready"),
    ("imports (cifar_dist, Hydra, ...)", "interpreter and imports", "L", APP + "main:enter"),
    ("Hydra compose, override and run-dir checks", "config compose and checks", "L", APP + "select_launcher:enter"),
    ("launcher set-up", "config compose and checks", "L", "launcher.launch:enter"),
]
RANKS_UP = [
    ("mpirun start to rank processes", "launcher start to ranks up (Horovod init)", "W", "process_start"),
    (
        "rank wrapper (rank_exec) to the rank's python",
        "launcher start to ranks up (Horovod init)",
        "R",
        "process_start",
    ),
    ("rank interpreter start-up", "launcher start to ranks up (Horovod init)", "R", "interpreter_ready"),
    ("rank imports", "launcher start to ranks up (Horovod init)", "R", APP + "main:enter"),
    ("rank config compose and checks", "launcher start to ranks up (Horovod init)", "R", TRAINER + "train:enter"),
]
LOCAL_UP = [("in-process launcher to trainer", "config compose and checks", "R", TRAINER + "train:enter")]
TRAINER_START = [
    ("trainer config typing and checks", "config compose and checks", "R", TRAINER + "start_engine:enter"),
    (
        "engine start (its framework's imports)",
        "launcher start to ranks up (Horovod init)",
        "R",
        TRAINER + "start_engine:exit",
    ),
    ("seeds, precision policy", "launcher start to ranks up (Horovod init)", "R", TRAINER + "start_run:exit"),
    ("data load", "data load and pipeline build", "R", TRAINER + "load_data:exit"),
    ("model build + compile", "model build and weights broadcast", "R", TRAINER + "build_model:exit"),
    (
        "weights broadcast / resume decision",
        "model build and weights broadcast",
        "R",
        TRAINER + "restore_or_start:exit",
    ),
    ("input pipeline build", "data load and pipeline build", "R", TRAINER + "make_streams:exit"),
    ("metrics record + tracker open", "tracking", "R", TRAINER + "open_tracker:exit"),
    ("callbacks + Keras fit set-up", "Keras fit overhead", "R", "fit.train_begin.last"),
]
FIT = ("fit", None, "R", "fit.train_end.first")
AFTER_FIT = [
    ("Keras fit tear-down", "Keras fit overhead", "R", TRAINER + "finish:enter"),
    ("BatchNorm sync, weight digests, peak RSS", "final test (plain and TTA)", "R", RECIPE + "final_test:enter"),
    # recipe.final_test scores the plain model and its TTA view in one pass (models/tta.plain_and_tta)
    ("final test, plain and TTA", "final test (plain and TTA)", "R", EXACT_TEST + "evaluate_exact:exit"),
    ("final test's records", "final test (plain and TTA)", "R", RECIPE + "final_test:exit"),
    ("model save", "model save", "R", "cifar_dist.rundir.checkpoints.atomic_save_model:exit"),
    ("learning-curve plot + metrics.json", "checkpoints and logs", "R", RECORDS + "write_record:exit"),
    ("tracker finish + result broadcast", "tracking", "R", TRAINER + "finish:exit"),
    ("trainer return", "exit", "R", TRAINER + "train:exit"),
]
END = [
    ("rank exit to launcher return", "exit", "L", "launcher.launch:exit"),
    ("tracking after the job (launching process)", "tracking", "L", APP + "record_end:exit"),
    ("end-of-job line", "exit", "L", APP + "main:exit"),
    ("atexit handlers", "exit", "L", "process_exit"),
]
RANK_END = [("rank's end of job + atexit handlers (Horovod shutdown)", "exit", "R", "process_exit")]


def function_markers() -> Set[Tuple[str, str]]:
    """(module, function) of every marker that is a package function's enter or exit."""
    markers = START + RANKS_UP + LOCAL_UP + TRAINER_START + [FIT] + AFTER_FIT + END + RANK_END
    found = set()
    for *_, event in markers:
        name, _, edge = event.rpartition(":")
        if event.startswith("cifar_dist.") and edge in ("enter", "exit"):
            module, _, function = name.rpartition(".")
            found.add((module, function))
    return found


def probe_spans() -> Dict[str, Tuple[str, ...]]:
    """The functions benchmarks/phase_probe/ wraps (module -> names), read from its own list."""
    path = Path(__file__).resolve().parent / "phase_probe" / "phase_probe.py"
    spec = importlib.util.spec_from_file_location("phase_probe_spans", path)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return probe.SPANS


def module_names(module: str) -> Set[str]:
    """The names a package module defines or imports at its top level, read from its source (no import of it)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return set()
    names = set()
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def missing_functions() -> List[str]:
    """Every function a marker or the probe names that the package no longer has, or that the probe does not wrap
    (its marker would never be written)."""
    spans = probe_spans()
    wanted = function_markers() | {(m, f) for m, functions in spans.items() for f in functions}
    problems = [f"{m}.{f}: not in the package" for m, f in sorted(wanted) if f not in module_names(m)]
    problems += [
        f"{m}.{f}: a marker, but benchmarks/phase_probe does not wrap it"
        for m, f in sorted(function_markers())
        if f not in spans.get(m, ())
    ]
    return problems


def processes(events: List[dict]) -> Tuple[List[dict], List[dict], List[dict]]:
    """The events of the launching process, of rank 0's first process (a launcher's wrapper, when it has one) and of
    rank 0's trainer; the same list three times for an in-process (1-rank local) run."""
    by_pid: Dict[int, List[dict]] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        by_pid.setdefault(e["pid"], []).append(e)
    starts = sorted((evs[0]["t"], pid) for pid, evs in by_pid.items() if evs[0]["rank"] is None)
    if not starts:
        raise ValueError("no launching process in the events (was CIFAR_DIST_PHASE_LOG set for the command?)")
    launching = by_pid[starts[0][1]]
    rank0 = sorted((evs for evs in by_pid.values() if evs[0]["rank"] == 0), key=lambda evs: evs[0]["t"])
    trainer = [evs for evs in rank0 if any(e["event"] == TRAINER + "train:enter" for e in evs)]
    if not rank0 or not trainer:
        return launching, launching, launching
    return launching, rank0[0], trainer[0]


def first_after(events: List[dict], name: str, t: float) -> Optional[dict]:
    return next((e for e in events if e["event"] == name and e["t"] >= t), None)


def walk(markers, procs: Dict[str, List[dict]], t: float, phases: List[dict]) -> float:
    """Append a phase per marker found after ``t``; a missing marker's time goes to the next phase found."""
    merged: List[str] = []
    for name, category, proc, event in markers:
        found = first_after(procs[proc], event, t)
        if found is None:
            merged.append(name)
            continue
        phases.append({"phase": " + ".join(merged + [name]), "category": category, "seconds": found["t"] - t})
        merged, t = [], found["t"]
    if merged and phases:
        phases[-1]["phase"] += " + " + " + ".join(merged)
    return t


def breakdown(events: List[dict], cmd_start: float, cmd_end: float) -> Dict[str, object]:
    """Consecutive phases from the command's start to its end (seconds add up to the whole command)."""
    launching, wrapper, rank0 = processes(events)
    procs = {"L": launching, "W": wrapper, "R": rank0}
    phases: List[dict] = []
    t = walk(START + (RANKS_UP if rank0 is not launching else LOCAL_UP) + TRAINER_START, procs, cmd_start, phases)
    fit_end = first_after(rank0, FIT[3], t)
    fit = fit_phases(rank0, t, fit_end["t"]) if fit_end else {"phases": [], "epochs": []}
    if fit_end:
        phases += fit["phases"]
        t = fit_end["t"]
    t = walk(AFTER_FIT + (RANK_END if rank0 is not launching else []) + END, procs, t, phases)
    phases.append({"phase": "interpreter teardown", "category": "exit", "seconds": max(cmd_end - t, 0.0)})
    return {
        "whole_s": cmd_end - cmd_start,
        "phases": phases,
        "categories": by_category(phases),
        "epochs": fit["epochs"],
        "callbacks": callback_seconds(rank0),
        "fit_return_wait_s": fit_return_wait(events),
    }


def fit_return_wait(events: List[dict]) -> float:
    """The longest wait of any rank between Keras' last on_train_end and the trainer's next step (``finish``).

    Measured 2026-11-25: 0 in most runs, 16-40 s in others, on one rank or both,
    with no Python frame running (model.fit's frame being torn down). The other
    ranks wait for that rank at the next collective, so it delays the whole job.
    """
    waits = [0.0]
    for pid in {e["pid"] for e in events}:
        mine = [e for e in events if e["pid"] == pid]
        end = [e["t"] for e in mine if e["event"] == "fit.train_end.last"]
        finish = [e["t"] for e in mine if e["event"] == TRAINER + "finish:enter"]
        if end and finish:
            waits.append(finish[0] - end[-1])
    return max(waits)


def by_category(phases: List[dict]) -> Dict[str, float]:
    totals = {c: 0.0 for c in CATEGORIES}
    for p in phases:
        totals[p["category"]] = totals.get(p["category"], 0.0) + p["seconds"]
    return totals


def callback_seconds(events: List[dict]) -> Dict[str, float]:
    """Each Keras callback hook's total time over the run (rank 0)."""
    totals: Dict[str, float] = {}
    for e in events:
        if e["event"] == "callback":
            totals[e["hook"]] = totals.get(e["hook"], 0.0) + e["seconds"]
    return totals


def epoch_records(events: List[dict], start: float, end: float) -> List[dict]:
    """Per epoch: training, validation (0 when the epoch did not validate), epoch callbacks, checkpoint seconds."""
    epochs, current = [], None
    for e in (e for e in events if start <= e["t"] <= end):
        name = e["event"]
        if name == "fit.epoch_begin.first":
            current = {"begin": e["t"], "train_s": 0.0, "val_s": 0.0, "callbacks_s": 0.0, "checkpoint_s": 0.0}
            epochs.append(current)
        elif current is None:
            continue
        elif name == "fit.epoch_begin.last":
            current.update(callbacks_s=current["callbacks_s"] + e["t"] - current["begin"], steps_from=e["t"])
        elif name == "fit.test_begin.first" and "steps_to" not in current:
            current["steps_to"] = current["val_from"] = e["t"]
        elif name == "fit.test_end.last":
            current["val_s"] += e["t"] - current.get("val_from", e["t"])
        elif name == "fit.epoch_end.first":
            current.setdefault("steps_to", e["t"])
            current["end_from"] = e["t"]
        elif name == "fit.epoch_end.last":
            current["callbacks_s"] += e["t"] - current.get("end_from", e["t"])
            current["end"] = e["t"]
        elif name == "callback" and e["hook"] == "AtomicCheckpoint.on_epoch_end":
            current["checkpoint_s"] += e["seconds"]
    for ep in epochs:
        ep["train_s"] = ep.get("steps_to", ep.get("end", ep["begin"])) - ep.get("steps_from", ep["begin"])
    return [{k: ep[k] for k in ("train_s", "val_s", "callbacks_s", "checkpoint_s")} for ep in epochs]


def first_epoch_extra(values: List[float]) -> float:
    """How much longer the first value is than the median of the rest (0 with fewer than two)."""
    rest = [v for v in values[1:] if v > 0]
    return max(values[0] - statistics.median(rest), 0.0) if values and rest else 0.0


def fit_phases(events: List[dict], start: float, end: float) -> Dict[str, object]:
    """The fit's time (``start`` to ``end``) as tracing, steps, validation, callbacks, checkpoints, Keras overhead."""
    epochs = epoch_records(events, start, end)
    train = [e["train_s"] for e in epochs]
    vals = [e["val_s"] for e in epochs]
    tracing_train, tracing_val = first_epoch_extra(train), first_epoch_extra(vals)
    checkpoint = sum(e["checkpoint_s"] for e in epochs)
    parts = [
        ("tracing + first steps beyond a steady epoch (training)", "tracing/compilation (first epoch)", tracing_train),
        ("tracing beyond a steady validation", "tracing/compilation (first epoch)", tracing_val),
        ("training steps (steady)", "training steps", sum(train) - tracing_train),
        (
            f"validation, BatchNorm sync before it ({sum(1 for v in vals if v > 0)} of {len(vals)} epochs)",
            "validation (per epoch)",
            sum(vals) - tracing_val,
        ),
        ("epoch checkpoints", "checkpoints and logs", checkpoint),
        (
            "other epoch callbacks (metric averaging, BatchNorm sync, CSV, TensorBoard, metrics.json)",
            "checkpoints and logs",
            sum(e["callbacks_s"] for e in epochs) - checkpoint,
        ),
    ]
    phases = [{"phase": name, "category": cat, "seconds": s} for name, cat, s in parts]
    phases.append(
        {
            "phase": "Keras between epochs and validations",
            "category": "Keras fit overhead",
            "seconds": (end - start) - sum(p["seconds"] for p in phases),
        }
    )
    return {"phases": phases, "epochs": epochs}
