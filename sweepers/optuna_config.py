"""``hydra/sweeper=optuna``'s settings and its samplers (``hydra/sweeper/sampler=tpe|random|grid|cmaes|nsgaii``).

The keys are hydra-optuna-sweeper 1.3's, so its users' commands and configs keep working: ``n_trials``,
``n_jobs``, ``direction``, ``storage``, ``study_name``, ``sampler``, ``params`` (the search space in Hydra's
override syntax, ``tag(log, interval(1e-4, 1e-2))``), ``max_failure_rate`` and ``custom_search_space``. What
differs: ``direction`` is ``maximize`` (every cifar_dist job returns its test accuracy), the deprecated
``search_space`` is gone (Hydra 1.2 replaced it with ``params``), and the samplers take the arguments Optuna 5
has not deprecated (TPE's ``consider_prior``, ``prior_weight``, ``consider_magic_clip``, ``consider_endpoints``
and ``warn_independent_sampling``, CMA-ES's ``sigma0``, ``restart_strategy`` and ``inc_popsize`` warn, and go in
Optuna 6); MOTPESampler is gone (Optuna 4): ``tpe`` samples several objectives too.

The sweeper's config is not instantiated recursively: the sweeper builds the sampler itself, once it knows the
search space (``GridSampler`` takes it as an argument) and that Optuna is installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from cifar_dist.config.options import config_option
from cifar_dist.config.plugin_names import OPTUNA_SWEEPER_CLASS


class Direction(Enum):
    minimize = 1
    maximize = 2


@config_option("hydra/sweeper/sampler", "tpe")
@dataclass
class TPESamplerConf:
    """https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.TPESampler.html"""

    _target_: str = "optuna.samplers.TPESampler"
    seed: Optional[int] = None
    n_startup_trials: int = 10
    n_ei_candidates: int = 24
    multivariate: Optional[bool] = None
    group: bool = False
    constant_liar: bool = True  # Optuna 5's default: the trials of a batch are not asked for the same point


@config_option("hydra/sweeper/sampler", "random")
@dataclass
class RandomSamplerConf:
    _target_: str = "optuna.samplers.RandomSampler"
    seed: Optional[int] = None


@config_option("hydra/sweeper/sampler", "grid")
@dataclass
class GridSamplerConf:
    """Every combination of the ``choice``/``range`` sweeps once (the sweeper passes the grid); n_trials at most
    the grid's size."""

    _target_: str = "optuna.samplers.GridSampler"
    seed: Optional[int] = None


@config_option("hydra/sweeper/sampler", "cmaes")
@dataclass
class CmaEsSamplerConf:
    _target_: str = "optuna.samplers.CmaEsSampler"
    seed: Optional[int] = None
    n_startup_trials: int = 1
    popsize: Optional[int] = None
    use_separable_cma: bool = False
    with_margin: bool = False
    lr_adapt: bool = False
    consider_pruned_trials: bool = False


@config_option("hydra/sweeper/sampler", "nsgaii")
@dataclass
class NSGAIISamplerConf:
    _target_: str = "optuna.samplers.NSGAIISampler"
    seed: Optional[int] = None
    population_size: int = 50
    mutation_prob: Optional[float] = None
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5


@config_option("hydra/sweeper", "optuna")
@dataclass
class OptunaSweeperConf:
    """``hydra/sweeper=optuna``: Optuna chooses each batch of ``n_jobs`` points, the sweep launcher runs them."""

    _target_: str = OPTUNA_SWEEPER_CLASS
    _recursive_: bool = False  # the sampler is built by the sweeper (see the module's docstring)
    defaults: List[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: Any = MISSING
    # maximize, minimize, or a list of them (one per value a job returns)
    direction: Any = Direction.maximize
    # where the study lives: None (in memory, gone with the process) or a database URL (sqlite:///optuna.db):
    # a sweep that stopped, re-run with the same command, continues it
    storage: Optional[Any] = None
    # None: named after the command's search (so that the same command finds its study again)
    study_name: Optional[str] = None
    n_trials: int = 20  # trials in the study, counting those an earlier run of the command finished
    n_jobs: int = 2  # trials per batch: the sweep launcher runs a batch together (launcher.concurrent)
    max_failure_rate: float = 0.0  # the share of a batch's trials that may fail before the study stops
    params: Optional[Dict[str, str]] = None  # key: a sweep in Hydra's override syntax, e.g. interval(0, 1)
    # a function(cfg, trial) that suggests more parameters, named as an instantiate target (module.function)
    custom_search_space: Optional[str] = None
