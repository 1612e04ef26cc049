"""``hydra/sweeper=optuna``: Optuna chooses each batch of points, cifar_dist's sweep launcher runs them, and every
trial's test accuracy goes back to the study.

cifar_dist's own Hydra sweeper, with hydra-optuna-sweeper's settings (``optuna_config.py``) and override syntax
(``optuna_space.py``): that plugin's last release (1.3.0) pins ``optuna<3``, whose SQLite storage no longer opens
under SQLAlchemy 2. What it does beyond the plugin:

- it maximises by default (every cifar_dist job returns its test accuracy); ``minimize`` gets a one-line warning;
- a study in a database (``hydra.sweeper.storage=sqlite:///optuna.db``) is continued by the same command: the
  trials it finished are not run again, those a killed sweep left running are run again under their own numbers
  (so in their own run dirs, where a run resumes from its checkpoints), and new ones are asked until the study
  has ``n_trials`` (``optuna_study.py``); a sweep from another sweep dir on the same study while the first runs
  leaves the first's running trials to it, and numbers its own after every stored one;
- trial N runs as point N of the sweep (its run dir is ``<sweep dir>/N``), so a trial in optuna-dashboard is the
  run dir of the same number;
- a failed trial is recorded FAIL and printed once; when more trials of a batch fail than
  ``max_failure_rate`` allows, the study stops in one line, and ``optimization_results.yaml`` holds the best of
  the trials that completed;
- settings Optuna cannot use, a storage it cannot open and a missing Optuna are one line each, before any trial.

Hydra instantiates sweepers only from ``hydra_plugins``: the class Hydra sees is the shim in
``hydra_plugins/cifar_dist_launcher/cifar_dist_optuna.py``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.hydra_internals import failure_of
from cifar_dist.common.sweep_errors import SweepRefused
from cifar_dist.rundir.owner import SWEEP_RECORD
from cifar_dist.rundir.saved_config import redact_yaml_file
from cifar_dist.sweepers.optuna_space import SearchSpace, params_lines, search_space
from cifar_dist.sweepers.optuna_study import (
    SWEEP_DIR,
    finished_already,
    finished_count,
    mark_owner,
    open_study,
    running_trials,
    save_results,
    stopped,
    storage_label,
    study_name,
)

log = logging.getLogger(__name__)

DIRECTIONS = ("maximize", "minimize")


def direction_names(direction: Any) -> List[str]:
    items = direction if isinstance(direction, (list, tuple)) or OmegaConf.is_list(direction) else [direction]
    return [str(getattr(d, "name", d)) for d in items]


def warn_if_minimizing(directions: List[str]) -> None:
    if directions == ["minimize"]:
        log.warning(
            "hydra.sweeper.direction=minimize: every cifar_dist job returns its test accuracy, so this "
            "searches for the worst point; drop the override (the default is maximize)"
        )


def check_settings(directions: List[str], n_trials: int, n_jobs: int, max_failure_rate: float) -> None:
    """One line for the first setting the sweep cannot run with."""
    problems = [
        (
            not directions or any(d not in DIRECTIONS for d in directions),
            f"direction={directions}: maximize or minimize",
        ),
        (n_trials < 0, f"n_trials={n_trials}: the trials of the study, 0 or more"),
        (n_jobs < 1, f"n_jobs={n_jobs}: the trials of a batch, 1 or more"),
        (not 0.0 <= max_failure_rate <= 1.0, f"max_failure_rate={max_failure_rate}: a share of a batch, 0..1"),
    ]
    for bad, problem in problems:
        if bad:
            raise SweepRefused(f"hydra.sweeper.{problem}")


def require_optuna() -> Any:
    try:
        import optuna  # lazy: the optuna extra
    except ImportError:
        raise SweepRefused(
            "hydra/sweeper=optuna needs Optuna: pip install 'cifar_dist[optuna]' (scripts/install.sh installs it)"
        ) from None
    return optuna


def objective_values(value: Any, count: int) -> Optional[List[float]]:
    """What a job returned as ``count`` finite numbers, or None."""
    try:
        values = [float(value)] if count == 1 else [float(v) for v in value]
    except (TypeError, ValueError):
        return None
    return values if len(values) == count and all(math.isfinite(v) for v in values) else None


def save_sweep_record(config: DictConfig, sweep_dir: Path) -> None:
    """``multirun.yaml``, as Hydra's basic sweeper writes it before the first batch (it marks the folder as a
    sweep's, which a re-run may use again), secrets masked."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / SWEEP_RECORD)
    redact_yaml_file(sweep_dir / SWEEP_RECORD)


def consecutive(trials: Sequence[Any]) -> List[List[Any]]:
    """``trials`` split where their numbers jump: a launch numbers its points from its first one on."""
    groups: List[List[Any]] = []
    for trial in trials:
        if groups and groups[-1][-1].number + 1 == trial.number:
            groups[-1].append(trial)
        else:
            groups.append([trial])
    return groups


class OptunaSweeper(Sweeper):
    def __init__(
        self,
        sampler: DictConfig,
        direction: Any,
        storage: Any,
        study_name: Optional[str],
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        params: Optional[DictConfig],
        custom_search_space: Optional[str],
    ) -> None:
        self.directions = direction_names(direction)
        warn_if_minimizing(self.directions)
        self.sampler_config = sampler
        self.storage = storage
        self.study_name = study_name
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.max_failure_rate = max_failure_rate
        self.params = params
        self.custom_search_space = custom_search_space
        self.config: Optional[DictConfig] = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    def sweep(self, arguments: List[str]) -> None:
        assert self.config is not None
        check_settings(self.directions, self.n_trials, self.n_jobs, self.max_failure_rate)  # here: one line
        optuna = require_optuna()
        search = params_lines(self.params) + list(arguments)
        space = search_space(search)
        sampler, n_trials = self.sampler_and_trials(space)
        name = study_name(self.study_name, search, self.directions)
        study = open_study(self.storage, name, sampler, self.directions)
        log.info(
            "Optuna %s: study %s (%s), %s, %s",
            optuna.__version__,
            name,
            storage_label(self.storage),
            type(sampler).__name__,
            self.directions,
        )
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        rerun, elsewhere = running_trials(study, sweep_dir)
        to_run = n_trials - finished_count(study) - len(elsewhere)
        self.report_progress(study, rerun, elsewhere, to_run, n_trials)
        save_sweep_record(self.config, sweep_dir)
        while to_run > 0:
            size = min(self.n_jobs, to_run)
            # an interrupted trial goes on as the same trial: Trial(study, id) is the object study.ask() returns
            batch = [optuna.trial.Trial(study, t._trial_id) for t in rerun[:size]]
            for trial in batch:  # run here now (a stopped sweep's from another dir too): another sweep leaves it
                mark_owner(trial, sweep_dir)
            rerun = rerun[size:]
            batch += [self.ask(study, sweep_dir) for _ in range(size - len(batch))]
            failed = self.run_batch(study, space, batch)
            if failed / len(batch) > self.max_failure_rate:
                raise stopped(study, self.max_failure_rate, save_results(study, sweep_dir))
            to_run -= len(batch)
        self.report_best(study, save_results(study, sweep_dir))

    def sampler_and_trials(self, space: SearchSpace) -> tuple:
        """The configured sampler, and the trials the study may have: a grid has no more than its points."""
        import optuna  # lazy: Optuna
        from hydra.utils import get_class, instantiate  # lazy: only a sweep builds a sampler

        if not issubclass(get_class(self.sampler_config._target_), optuna.samplers.GridSampler):
            return instantiate(self.sampler_config), self.n_trials
        grid = space.grid()
        return instantiate(self.sampler_config, search_space=grid), min(
            self.n_trials, math.prod(map(len, grid.values()))
        )

    def run_batch(self, study: Any, space: SearchSpace, trials: List[Any]) -> int:
        """Run the trials (the sweep's points of their numbers) and tell the study; how many failed."""
        overrides = {trial.number: space.overrides(self.choose(space, trial)) for trial in trials}
        returns: Dict[int, JobReturn] = {}
        for group in consecutive(trials):
            launched = self.launcher.launch([overrides[t.number] for t in group], initial_job_idx=group[0].number)
            returns.update(zip((t.number for t in group), launched))
        return sum(self.record(study, trial, returns[trial.number]) for trial in trials)

    def choose(self, space: SearchSpace, trial: Any) -> Dict[str, Any]:
        """The trial's values: the space's, then those of ``custom_search_space`` (a function(cfg, trial))."""
        params = space.suggest(trial)
        if self.custom_search_space:
            from hydra.utils import get_method  # lazy: only with a custom search space

            get_method(self.custom_search_space)(self.config, trial)
            params.update({key: value for key, value in trial.params.items() if key not in params})
        return params

    def record(self, study: Any, trial: Any, ret: JobReturn) -> bool:
        """Tell the study the trial's outcome; True when it failed (then printed once, here)."""
        import optuna  # lazy: Optuna

        state = optuna.trial.TrialState
        if ret.status == JobStatus.COMPLETED:
            values = objective_values(ret.return_value, len(self.directions))
            problem = f"it returned {ret.return_value!r}, not {len(self.directions)} finite number(s)"
        else:  # the exception the point failed with (the property would print Hydra's "Error executing job")
            values, problem = None, str(failure_of(ret))
        if finished_already(study, trial):  # another sweep of the study took it (it thought this one stopped)
            log.warning("trial #%d was finished by another sweep of the study meanwhile: not told again", trial.number)
            return False
        try:
            study.tell(trial, state=state.COMPLETE if values else state.FAIL, values=values)
        except RuntimeError as exc:  # GridSampler calls study.stop() once its grid is done: told all the same
            if "Study.stop" not in str(exc):
                raise
        if values is None:
            log.warning("trial #%d failed: %s", trial.number, problem)
        return values is None

    @staticmethod
    def ask(study: Any, sweep_dir: Path) -> Any:
        """A new trial (numbered after every trial the study holds), marked as this sweep dir's."""
        trial = study.ask()
        mark_owner(trial, sweep_dir)
        return trial

    def report_progress(self, study: Any, rerun: List[Any], elsewhere: List[Any], to_run: int, n_trials: int) -> None:
        finished = finished_count(study)
        if elsewhere:
            dirs = sorted({str(t.user_attrs[SWEEP_DIR]) for t in elsewhere})
            log.info(
                "%d trial(s) of the study run now in another sweep dir (%s in %s): left to that sweep, counted as "
                "the study's",
                len(elsewhere),
                ", ".join(f"#{t.number}" for t in elsewhere),
                ", ".join(dirs),
            )
        if not finished and not rerun:
            return
        if to_run <= 0:
            log.info(
                "the study has its %d trials (hydra.sweeper.n_trials=%d): nothing to run; raise n_trials to go on",
                finished + len(elsewhere),
                n_trials,
            )
            return
        again = f", {len(rerun)} interrupted ({', '.join(f'#{t.number}' for t in rerun)}: run again)" if rerun else ""
        log.info("continuing the study: %d trial(s) finished (not run again)%s, %d to run", finished, again, to_run)

    def report_best(self, study: Any, saved: Optional[Path]) -> None:
        if saved is None:
            log.warning("no trial of the study completed: no %s", "optimization_results.yaml")
        elif len(self.directions) == 1:
            log.info("Best parameters: %s, value %s (%s)", study.best_trial.params, study.best_trial.value, saved)
        else:
            log.info("%d Pareto-optimal trial(s) (%s)", len(study.best_trials), saved)
