"""Every point of a sweep batch is checked before the first one starts, as a single run is.

A single run's bad values and run-dir conflicts are refused before Hydra
writes anything (``rundir/preflight.py``, ``rundir/guard.py``). A sweep's
points exist only once the sweeper hands the launcher a batch, and Hydra's
``run_job`` writes a point's ``.hydra/`` and job log before any callback can
look at the point's dir: a point into a folder of the user's own files, or a
re-run that changes a point's settings, would otherwise be taken over (the
saved config the resume policy compares with already overwritten). So here,
for every point of the batch, before any of them runs:

1. its values (``validation.validate``, the launcher's settings included);
2. its dir (``rundir.guard.guard_run_dir``): a foreign folder, a live holder,
   a resume with other settings, following a Slurm job with other settings;
   the locks taken are held until the batch has ended (``RunDirGuard``).

Each bad point is one line naming the point and its overrides. When every
point of the batch is bad, the sweep is refused as a single run is: those
lines, exit 2, and nothing this command created is left (point dirs, the sweep
dir with Hydra's ``multirun.yaml``); in a sweep dir of an earlier sweep, its
``multirun.yaml``, which the sweeper replaced before the first batch, is put
back as it was (``RecordBefore``). Otherwise the bad points fail alone,
untouched, and the others run.

Only apps whose config has cifar_dist's run-dir callbacks are checked (Hydra's
own launcher test apps have none).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.atomic_files import atomic_write_text
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.redaction import redact_text
from cifar_dist.common.sweep_errors import PointFailed
from cifar_dist.rundir.guard import RunDirGuard
from cifar_dist.rundir.owner import SWEEP_RECORD, only_scaffolding, remove_created, remove_if_created_here
from cifar_dist.rundir.preflight import check_values
from cifar_dist.rundir.stack import check_stack
from cifar_dist.training.engines.choice import resolve_engine


def point_dir(config: DictConfig) -> Path:
    """The point's output dir, computed as Hydra's ``run_job`` computes it (its Hydra config current)."""
    hydra_config = HydraConfig.instance()
    before = hydra_config.cfg
    hydra_config.set_config(config)
    try:
        return Path(str(config.hydra.sweep.dir), str(config.hydra.sweep.subdir)).absolute()
    finally:
        hydra_config.cfg = before


def _has_callback(config: DictConfig, name: str) -> bool:
    return OmegaConf.select(config, f"hydra.callbacks.{name}", default=None) is not None


def point_label(config: DictConfig) -> str:
    """``point #1 (optimizer.lr=0.0003)``: the point's number and its overrides, secrets masked."""
    overrides = " ".join(str(o) for o in config.hydra.overrides.task)
    return f"point #{config.hydra.job.num} ({redact_text(overrides)})"


def _value_problem(config: DictConfig) -> str:
    if not _has_callback(config, "run_dir_check"):
        return ""
    try:
        check_values(config)
    except CifarDistError as error:
        return str(error)
    return ""


def _dir_problem(config: DictConfig, guard: RunDirGuard) -> str:
    """The point's engine chosen (engine=auto: its dir's checkpoints keep theirs), then its dir guarded: in the
    order of a single run's callbacks (conf/hydra/default.yaml)."""
    try:
        if _has_callback(config, "run_dir_check"):
            check_stack(point_dir(config), config)  # as RunDirCheck does for a run: a resume's checkpoints' stack
        if _has_callback(config, "engine_choice"):
            resolve_engine(config, point_dir(config))
        if _has_callback(config, "run_dir_guard"):
            guard.guard(point_dir(config), config)
    except CifarDistError as error:
        return str(error)
    return ""


def refused_points(points: List[DictConfig], guard: RunDirGuard) -> Dict[int, str]:
    """Index -> why, for every point that must not start: values first (nothing touched), then its dir."""
    refused = {i: problem for i, problem in ((i, _value_problem(c)) for i, c in enumerate(points)) if problem}
    for i, config in enumerate(points):
        problem = "" if i in refused else _dir_problem(config, guard)
        if problem:
            refused[i] = problem
    return refused


@dataclass(frozen=True)
class RecordBefore:
    """A sweep dir's ``multirun.yaml`` as it was before this command's sweeper replaced it (``text`` None: there
    was none), read when the launcher is set up, before the sweeper writes."""

    path: Path
    text: Optional[str]

    @classmethod
    def of(cls, sweep_dir: Path) -> RecordBefore:
        path = Path(sweep_dir).absolute() / SWEEP_RECORD
        try:
            return cls(path, path.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError):  # none (or none this command could read, so none it could replace)
            return cls(path, None)

    def put_back(self) -> None:
        """The record as it was: an earlier sweep's back in place (whole, never half written), or none."""
        if self.text is None:
            self.path.unlink(missing_ok=True)
            return
        atomic_write_text(self.path, self.text)


def check_points(
    points: List[DictConfig], guard: RunDirGuard, sweep_dir: Path, existed: Path, record: Optional[RecordBefore] = None
) -> Dict[int, str]:
    """Refused points (index -> one line); exits 2 when it is all of them, leaving nothing this command made:
    ``record``, the sweep dir's ``multirun.yaml`` before this command (its first batch only), is put back."""
    refused = refused_points(points, guard)
    if not refused or len(refused) < len(points):
        return refused
    release_unstarted(points, guard)
    if record is not None:
        record.put_back()
    remove_new_sweep_dir(sweep_dir, existed)
    for i, problem in sorted(refused.items()):
        print(f"cifar_dist: error: {point_label(points[i])}: {problem}", file=sys.stderr, flush=True)
    sys.exit(2)


def release_unstarted(points: List[DictConfig], guard: RunDirGuard) -> None:
    """Once the batch has ended (or was refused, or interrupted): the points' locks released, and the dir of a
    point that never started (no ``.hydra/``) removed when this command created it for the check."""
    guard.release_all()
    for config in points:
        run_dir = point_dir(config)
        if not (run_dir / ".hydra").exists() and only_scaffolding(run_dir):
            remove_if_created_here(run_dir)


def remove_new_sweep_dir(sweep_dir: Path, existed: Path) -> None:
    """Remove the sweep dir if this command created it (it did not exist, ``existed`` is the folder that did)
    and it holds nothing but the sweeper's record."""
    sweep_dir = Path(sweep_dir).absolute()
    if existed == sweep_dir or not sweep_dir.is_dir():
        return
    if all(entry.name == SWEEP_RECORD for entry in sweep_dir.iterdir()):
        remove_created(sweep_dir, existed)


def refused_return(config: DictConfig, why: str) -> Any:
    """The JobReturn of a point that was not started: FAILED with its one line, nothing of it written."""
    ret = JobReturn(
        overrides=[str(o) for o in config.hydra.overrides.task],
        hydra_cfg=config,
        cfg=OmegaConf.masked_copy(config, [k for k in config if k != "hydra"]),
        status=JobStatus.FAILED,
    )
    ret.return_value = PointFailed(f"point #{config.hydra.job.num}: {why}")
    return ret
