"""Whose folder is the run dir? A marker file says cifar_dist made it.

``hydra.run.dir`` may point at any folder. A run writes ``metrics.json``,
``training_log.csv``, ``learning_curves.png``, ``cifar_dist.log`` and more
into it and deletes its own leftover temp files there, so a folder that
holds someone's own files must not be taken over silently. When cifar_dist
creates a run dir (or finds it empty) it writes ``.cifar_dist_run`` (who
created it, when); run dirs of earlier versions are recognised by Hydra's
``.hydra/hydra.yaml`` naming the ``cifar_dist`` job, the run-dir lock file or
checkpoints (``checkpoints.list_checkpoints``). Any other folder with
files in it is refused before anything in it is touched, with the way out:
another ``hydra.run.dir``, or adopting the folder by creating an empty
marker (``touch <dir>/.cifar_dist_run``). An adopted folder's files that a
run would write, replace or delete are first moved aside as
``<name>.kept-<time>``: nothing a user wrote is lost.

The marker also tells a refused command whether it created the run dir
itself (same pid and host, see ``created_below``), so that it can
remove what it made and leave nothing behind under ``outputs/``.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from enum import Enum
from pathlib import Path
from typing import List, Set

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from cifar_dist.common.atomic_files import is_temp_name
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.results import EVALUATION_FILE, METRICS_FILE
from cifar_dist.config.launcher_object import launcher_class
from cifar_dist.config.override_syntax import shell_command
from cifar_dist.rundir.checkpoints import list_checkpoints
from cifar_dist.rundir.fingerprint import FINGERPRINT
from cifar_dist.rundir.lock import LOCK_NAME
from cifar_dist.rundir.ranks_lock import RANKS_LOCK_NAME

MARKER = ".cifar_dist_run"
OURS = "cifar_dist run dir"  # first words of the marker cifar_dist writes; an empty marker is a user's adoption
# Names a run writes, replaces or deletes at the top of its run dir (trainer, evaluation, launchers, tracking);
# the launchers' own folders (Slurm's slurm/, ...) each launcher names itself (launcher_folders).
OUTPUT_NAMES = (
    ".hydra",
    "cifar_dist.log",
    METRICS_FILE,
    "training_log.csv",
    "learning_curves.png",
    "tensorboard",
    "checkpoints",
    "saved_models",
    "logs",
    EVALUATION_FILE,
    "confusion_matrix.png",
    "predictions.csv",
    "mlflow_run.json",
    LOCK_NAME,
    RANKS_LOCK_NAME,
    FINGERPRINT,
)
# Written by cifar_dist before the job itself writes anything; a run dir holding only these (and an
# empty job log: a job that started has logged something) has nothing of a job in it.
SCAFFOLDING = (MARKER, LOCK_NAME, RANKS_LOCK_NAME, ".hydra", FINGERPRINT)
JOB_LOG = "cifar_dist.log"
SWEEP_RECORD = "multirun.yaml"  # what Hydra's sweepers write into a sweep dir before its first batch


class Owner(Enum):
    NEW = "new"  # does not exist yet
    EMPTY = "empty"
    OURS = "ours"  # our marker
    LEGACY = "legacy"  # made by an earlier cifar_dist (no marker yet)
    ADOPTED = "adopted"  # the user's empty marker: take it over, keeping copies
    FOREIGN = "foreign"


class ForeignRunDir(CifarDistError):
    """The run dir holds someone else's files."""


def _legacy(run_dir: Path) -> bool:
    """Files only cifar_dist writes: Hydra's record of the cifar_dist job, the run-dir lock, or checkpoints
    (a run with ``hydra.output_subdir=null`` has no ``.hydra/``; checkpoints copied to resume from have neither)."""
    if (run_dir / LOCK_NAME).is_file() or list_checkpoints(run_dir / "checkpoints"):
        return True
    try:
        text = (run_dir / ".hydra" / "hydra.yaml").read_text("utf-8", errors="replace")
    except OSError:
        return False
    return "name: cifar_dist" in text


def owner(run_dir: Path) -> Owner:
    """Who made ``run_dir``, read without changing anything in it."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return Owner.NEW
    marker = run_dir / MARKER
    if marker.is_file():
        return Owner.OURS if marker.read_text("utf-8", errors="replace").startswith(OURS) else Owner.ADOPTED
    if not any(run_dir.iterdir()):
        return Owner.EMPTY
    return Owner.LEGACY if _legacy(run_dir) else Owner.FOREIGN


def _listing(folder: Path) -> str:
    """``a, b, c, d, e and 3 more``: what a refused folder holds."""
    names = sorted(p.name for p in Path(folder).iterdir())
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def refuse_foreign_sweep_dir(sweep_dir: Path) -> None:
    """One line, nothing touched, when ``sweep_dir`` holds files but is no sweep's dir (no ``multirun.yaml``):
    its summary would list every run found below it as a point of this sweep."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir() or (sweep_dir / SWEEP_RECORD).is_file() or not any(sweep_dir.iterdir()):
        return
    raise ForeignRunDir(
        f"sweep dir {sweep_dir} exists and is not the dir of a sweep (it holds {_listing(sweep_dir)}, no "
        f"{SWEEP_RECORD}); choose another hydra.sweep.dir: a new or empty folder, "
        "or an earlier sweep's dir to re-run it"
    )


def refuse_foreign(run_dir: Path) -> None:
    """One line, nothing touched, when ``run_dir`` holds files cifar_dist did not write."""
    if owner(run_dir) is not Owner.FOREIGN:
        return
    raise ForeignRunDir(
        f"run dir {run_dir} exists and was not made by cifar_dist (it holds {_listing(run_dir)}); choose another "
        f"hydra.run.dir, or adopt it (files a run would write are then moved aside as <name>.kept-<time>, "
        f"never deleted) with: {shell_command('touch', Path(run_dir) / MARKER)}"
    )


def launcher_folders() -> Set[str]:
    """The folders launchers write at the top of a run dir (``Launcher.run_dir_folders``: Slurm's ``slurm/``, ...),
    of every launcher option in Hydra's ConfigStore, asked of the class its ``_target_`` names: the core imports
    no launcher."""
    found: Set[str] = set()
    for entry in ConfigStore.instance().repo.get("launcher", {}).values():
        node = getattr(entry, "node", None)  # (a nested group would be a dict: no launcher option)
        cls = launcher_class(node.get("_target_") if isinstance(node, DictConfig) else None)
        found.update(getattr(cls, "run_dir_folders", ()))  # (None: an option without a class to ask)
    return found


def keep_aside(run_dir: Path) -> List[Path]:
    """Move every entry a run would write, replace or delete to ``<name>.kept-<time>``; the new paths."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    written = set(OUTPUT_NAMES) | launcher_folders()
    kept = []
    for entry in sorted(Path(run_dir).iterdir()):
        if entry.name in written or is_temp_name(entry.name):
            target = entry.with_name(f"{entry.name}.kept-{stamp}")
            entry.rename(target)
            kept.append(target)
    return kept


def existing_ancestor(path: Path) -> Path:
    """The nearest folder of ``path`` (itself included) that exists now."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def claim(run_dir: Path, was: Owner, existed: Path) -> List[Path]:
    """Write our marker into ``run_dir`` (after the lock is held); an adopted folder's files are kept aside first.

    ``existed`` is the nearest folder that existed before this command made
    ``run_dir``: removing what this command created stops there.
    """
    kept = keep_aside(run_dir) if was is Owner.ADOPTED else []
    if was is not Owner.OURS:
        how = "created" if was is Owner.NEW else "adopted" if was is Owner.ADOPTED else "claimed"
        (Path(run_dir) / MARKER).write_text(
            f"{OURS}, {how} {time.strftime('%Y-%m-%d %H:%M:%S')} by pid {os.getpid()} "
            f"on host {socket.gethostname()}\nbelow {existed}\n",
            "utf-8",
        )
    return kept


def created_below(run_dir: Path) -> Path | None:
    """The folder that existed before this very process created ``run_dir``; None if another one made it."""
    try:
        lines = (Path(run_dir) / MARKER).read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    mine = f"by pid {os.getpid()} on host {socket.gethostname()}"
    if len(lines) < 2 or not lines[0].startswith(f"{OURS}, created") or not lines[0].endswith(mine):
        return None
    return Path(lines[1][len("below ") :]) if lines[1].startswith("below ") else None


def only_scaffolding(run_dir: Path, with_log: bool = False) -> bool:
    """``run_dir`` holds nothing but what cifar_dist writes before a job starts (its marker, lock, .hydra/, an
    empty log; ``with_log``: a log with lines, a job that stopped at its start before writing anything else)."""
    run_dir = Path(run_dir)
    return run_dir.is_dir() and all(
        entry.name in SCAFFOLDING or (entry.name == JOB_LOG and (with_log or entry.stat().st_size == 0))
        for entry in run_dir.iterdir()
    )


def remove_if_created_here(run_dir: Path) -> bool:
    """Remove ``run_dir`` when this very process created it (a refused command leaves nothing behind)."""
    existed = created_below(run_dir)
    if existed is None:
        return False
    remove_created(run_dir, existed)
    return True


def remove_created(path: Path, existed: Path) -> None:
    """Remove ``path`` and its parents this command created, up to ``existed`` (the folder that existed before)."""
    shutil.rmtree(path, ignore_errors=True)
    parent = Path(path).absolute().parent
    while parent != existed and existed in parent.parents:  # e.g. the date folder of the default run dir
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent
