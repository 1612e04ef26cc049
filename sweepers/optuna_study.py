"""The Optuna study a sweep adds its trials to: opened or continued, its progress, its results file.

A study is found by its name in its storage (``hydra.sweeper.study_name``, ``hydra.sweeper.storage``). Without
a name, it is named after the command's search (the overrides and ``hydra.sweeper.params``, and the
directions), so that the same command, run again, continues the same study: with a database storage
(``sqlite:///optuna.db``) a sweep that was killed or stopped goes on where it was. Each trial records the sweep
dir that runs it (``SWEEP_DIR``): the trials a stopped sweep left RUNNING are run again (in their own run dirs
when the sweep dir is the same); those another sweep is running now (from another sweep dir on the same study:
the lock of its point's run dir is held) are left to it and counted as the study's, and new trials are numbered
after every stored one.

Lazy: Optuna (and SQLAlchemy) are imported only when a sweep opens its study.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf

from cifar_dist.common.redaction import redact_text, redact_uri
from cifar_dist.common.sweep_errors import StudyStopped, SweepRefused
from cifar_dist.rundir.lock import in_use

RESULTS_FILE = "optimization_results.yaml"
EXAMPLE_STORAGE = "sqlite:///optuna.db"


def study_name(configured: Optional[str], search: Sequence[str], directions: Sequence[str]) -> str:
    """``hydra.sweeper.study_name``, or one the same search always gets."""
    if configured:
        return configured
    digest = hashlib.sha256("\n".join([*sorted(search), *directions]).encode()).hexdigest()
    return f"cifar_dist-{digest[:12]}"


def storage_label(storage: Any) -> str:
    """The storage as a log line may show it (no password)."""
    return "in memory" if storage is None else redact_uri(str(storage)) if isinstance(storage, str) else "configured"


def open_storage(storage: Any) -> Any:
    """What ``optuna.create_study`` takes: None (in memory), a URL (an SQLite file's folder is made), or the
    storage a ``_target_`` config builds."""
    if storage is None or not isinstance(storage, str):
        from hydra.utils import instantiate  # lazy: only for a storage config

        return None if storage is None else instantiate(storage)
    from sqlalchemy.engine import make_url  # lazy: Optuna's dependency

    url = make_url(storage)
    if url.drivername.startswith("sqlite") and url.database not in (None, "", ":memory:"):
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return storage


def open_study(storage: Any, name: str, sampler: Any, directions: List[str]) -> Any:
    """The study ``name`` in ``storage``, created if new; one line if it cannot be opened or optimises another way."""
    import optuna  # lazy: Optuna

    try:
        study = optuna.create_study(
            storage=open_storage(storage), study_name=name, sampler=sampler, directions=directions, load_if_exists=True
        )
    except Exception as exc:  # a bad URL, a missing driver, an unreadable file: Optuna and SQLAlchemy raise many
        first = redact_text(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        raise SweepRefused(
            f"hydra.sweeper.storage={storage_label(storage)}: Optuna cannot open the study there ({first}); "
            f"give a database URL such as {EXAMPLE_STORAGE}, or null to keep the study in memory"
        ) from None
    found = [d.name.lower() for d in study.directions]
    if found != list(directions):
        raise SweepRefused(
            f"the Optuna study {name} in {storage_label(storage)} optimises {found}, not {list(directions)}: "
            "set hydra.sweeper.direction as the study has it, or name a new study (hydra.sweeper.study_name)"
        )
    return study


# The user attribute that names the sweep dir whose point a trial is (a trial of the study is run there, as point N).
SWEEP_DIR = "cifar_dist_sweep_dir"


def mark_owner(trial: Any, sweep_dir: Path) -> None:
    """Record on a new trial which sweep dir runs it: another sweep of the study leaves it alone while it runs."""
    trial.set_user_attr(SWEEP_DIR, str(Path(sweep_dir).absolute()))


def running_trials(study: Any, sweep_dir: Path) -> Tuple[List[Any], List[Any]]:
    """(to run again, elsewhere): the RUNNING trials a stopped sweep left (this sweep dir's, or another dir's whose
    point nobody holds any more: run again here, under their own numbers), and those another sweep runs now (the
    lock of its point's run dir is held: running them here would train them twice, and its telling them would
    then fail)."""
    import optuna  # lazy: Optuna

    here = str(Path(sweep_dir).absolute())
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    owners = {t.number: t.user_attrs.get(SWEEP_DIR, here) for t in running}  # unmarked: a study from before marks
    elsewhere = [t for t in running if owners[t.number] != here and in_use(Path(owners[t.number]) / str(t.number))]
    return [t for t in running if t not in elsewhere], elsewhere


def finished_already(study: Any, trial: Any) -> bool:
    """Whether ``trial`` has its outcome in the study already (told by another sweep): telling it again fails."""
    return any(t.number == trial.number and t.state.is_finished() for t in study.get_trials(deepcopy=False))


def finished_count(study: Any) -> int:
    """Trials that have their outcome (complete, failed, pruned): never run again."""
    return sum(trial.state.is_finished() for trial in study.get_trials(deepcopy=False))


def save_results(study: Any, sweep_dir: Path) -> Optional[Path]:
    """The study's best so far in ``optimization_results.yaml`` (hydra-optuna-sweeper's format, and the failed
    trials' numbers); None before a trial completed."""
    import optuna  # lazy: Optuna

    trials = study.get_trials(deepcopy=False)
    if not any(t.state == optuna.trial.TrialState.COMPLETE for t in trials):
        return None
    results: Dict[str, Any] = {"name": "optuna"}
    if len(study.directions) < 2:
        results.update(best_params=study.best_trial.params, best_value=study.best_trial.value)
    else:
        results["solutions"] = [{"params": t.params, "values": t.values} for t in study.best_trials]
    results["failed_trials"] = [t.number for t in trials if t.state == optuna.trial.TrialState.FAIL]
    path = Path(sweep_dir) / RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(results), path)
    return path


def stopped(study: Any, max_failure_rate: float, saved: Optional[Path]) -> StudyStopped:
    """The one line of a study that stopped because too many trials of a batch failed."""
    import optuna  # lazy: Optuna

    trials = study.get_trials(deepcopy=False)
    failed = sum(t.state == optuna.trial.TrialState.FAIL for t in trials)
    kept = f"the best so far is in {saved}" if saved else "no trial completed"
    return StudyStopped(
        f"the Optuna study stopped: {failed} of {len(trials)} trials failed, more in a batch than "
        f"hydra.sweeper.max_failure_rate={max_failure_rate} allows ({kept}); raise "
        "hydra.sweeper.max_failure_rate (0..1) to let the study go on past failed trials"
    )
