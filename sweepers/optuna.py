"""``hydra/sweeper=optuna`` as cifar_dist needs it: maximise the test accuracy, keep the study's results.

hydra-optuna-sweeper 1.3 minimises by default, and every cifar_dist job
returns its final test accuracy, so an Optuna sweep without
``hydra.sweeper.direction=maximize`` would search for the worst point. The
package replaces the plugin's ``hydra/sweeper/optuna`` config by the same
config with ``direction: maximize`` and this subclass as its target (Hydra
instantiates sweepers only from ``hydra_plugins``: the class Hydra sees is in
``hydra_plugins/cifar_dist_launcher/``); a user who sets ``minimize`` gets a
one-line warning.

The subclass also keeps what the plugin loses when trials fail:

- a failed trial is recorded FAILED in the study and printed once (the
  plugin printed its error three times: its warning, its error listing the
  failures, then Hydra's report of the same exception);
- when more trials of a batch fail than ``hydra.sweeper.max_failure_rate``
  allows, the study stops with one line that names that setting, and
  ``optimization_results.yaml`` still holds the best of the trials that
  completed (the plugin wrote nothing).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import make_dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from cifar_dist.config.plugin_names import OPTUNA_SWEEPER_CLASS

log = logging.getLogger(__name__)

RESULTS_FILE = "optimization_results.yaml"
_IMPL_LOGGER = "hydra_plugins.hydra_optuna_sweeper._impl"


def store_config() -> None:
    """``hydra/sweeper=optuna`` -> the plugin's config with ``direction: maximize`` and the subclass as its
    target (the plugin is installed). Called after Hydra's plugin scan, which re-runs the plugin's own
    registration (``hydra_plugins/cifar_dist_launcher/registration.py``)."""
    from hydra_plugins.hydra_optuna_sweeper.config import Direction, OptunaSweeperConf  # lazy: the optuna extra

    conf = make_dataclass(
        "CifarDistOptunaSweeperConf",
        [("_target_", str, OPTUNA_SWEEPER_CLASS), ("direction", Any, Direction.maximize)],
        bases=(OptunaSweeperConf,),
    )
    ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=conf, provider="cifar_dist")


def direction_names(direction: Any) -> List[str]:
    items = direction if isinstance(direction, (list, tuple)) or OmegaConf.is_list(direction) else [direction]
    return [str(getattr(d, "name", d)) for d in items]


def warn_if_minimizing(direction: Any) -> None:
    if direction_names(direction) == ["minimize"]:
        log.warning(
            "hydra.sweeper.direction=minimize: every cifar_dist job returns its test accuracy, so this "
            "searches for the worst point; drop the override (the default is maximize)"
        )


class QuietReturn(JobReturn):
    """A point's JobReturn whose failure raises without Hydra's own "Error executing job" line."""

    @property
    def return_value(self) -> Any:
        if self.status == JobStatus.COMPLETED:
            return self._return_value
        raise self._return_value

    @return_value.setter
    def return_value(self, value: Any) -> None:
        self._return_value = value


class FailureTrackingLauncher:
    """The sweep launcher as the plugin sees it: failed points' JobReturns quiet, and remembered."""

    def __init__(self, launcher: Any):
        self.launcher = launcher
        self.failures: List[BaseException] = []

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        returns = list(self.launcher.launch(job_overrides, initial_job_idx))
        for ret in returns:
            if ret.status != JobStatus.COMPLETED:
                ret.__class__ = QuietReturn
                self.failures.append(ret._return_value)
        return returns

    def __getattr__(self, name: str) -> Any:
        return getattr(self.launcher, name)


class OneLinePerTrial(logging.Filter):
    """The plugin's log: its per-trial warning reworded, its list of failures dropped (StudyStopped says it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Storage: <optuna.storages._in_memory"):  # the in-memory storage the subclass made
            record.msg, record.args = "Storage: None (in memory)", ()
        if message.startswith("Failed experiment: "):
            record.msg, record.args = "trial failed: " + message[len("Failed experiment: ") :], ()
        return not (record.levelno >= logging.ERROR and "with max_failure_rate=" in message)


def save_results(study: Any, sweep_dir: Path) -> Optional[Path]:
    """The study's best so far in ``optimization_results.yaml`` (the plugin's format); None before a trial completed."""
    import optuna  # lazy: Optuna

    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        return None
    if len(study.directions) < 2:
        results: Dict[str, Any] = {
            "name": "optuna",
            "best_params": study.best_trial.params,
            "best_value": study.best_trial.value,
        }
    else:
        results = {"name": "optuna", "solutions": [{"params": t.params, "values": t.values} for t in study.best_trials]}
    failed = [t.number for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    results["failed_trials"] = failed
    path = Path(sweep_dir) / RESULTS_FILE
    OmegaConf.save(OmegaConf.create(results), path)
    return path


def stopped_message(failed: int, total: int, max_failure_rate: float, saved: Optional[Path]) -> str:
    kept = f"the best so far is in {saved}" if saved else "no trial completed"
    return (
        f"the Optuna study stopped: {failed} of {total} trials failed, more in a batch than "
        f"hydra.sweeper.max_failure_rate={max_failure_rate} allows ({kept}); raise "
        "hydra.sweeper.max_failure_rate (0..1) to let the study go on past failed trials"
    )


def study_name(configured: Optional[str]) -> str:
    return configured or f"cifar_dist-{uuid.uuid4().hex[:12]}"
