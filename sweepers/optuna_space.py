"""An Optuna sweep's search space, read from Hydra overrides, and each trial's overrides.

``hydra.sweeper.params`` and the command line's overrides, in Hydra's syntax (the command line wins for a key
given in both):

- ``choice(a, b)`` -> ``CategoricalDistribution``;
- ``range(1, 4)`` -> ``IntDistribution(1, 4)`` (a ``step`` or a float bound: ``FloatDistribution`` with that
  step; ``shuffle(range(...))``: categorical). Both ends are included, as hydra-optuna-sweeper did;
- ``interval(1e-4, 1e-2)`` -> ``FloatDistribution`` (``int(interval(1, 5))``: ``IntDistribution``),
  log-scaled when tagged ``log``: ``tag(log, interval(1e-4, 1e-2))``;
- anything else is passed to every trial as typed.

Lazy: Optuna is imported only when a sweep reads its space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer, ValueType

from cifar_dist.common.sweep_errors import SweepRefused

SWEEPS = "choice(), range() and interval()"


@dataclass(frozen=True)
class SearchSpace:
    """What Optuna chooses (key -> distribution) and what every trial gets as typed (override lines)."""

    distributions: Dict[str, Any]
    fixed: List[str]

    def overrides(self, params: Dict[str, Any]) -> List[str]:
        """A trial's overrides: its chosen values, then the fixed ones."""
        return [f"{key}={value}" for key, value in params.items()] + list(self.fixed)

    def suggest(self, trial: Any) -> Dict[str, Any]:
        """Ask ``trial`` for a value of every key (a trial that already has one keeps it: a re-run trial)."""
        return {key: suggest(trial, key, distribution) for key, distribution in self.distributions.items()}

    def grid(self) -> Dict[str, List[Any]]:
        """Every key's values, for ``GridSampler``; an interval has none."""
        return {key: grid_values(key, distribution) for key, distribution in self.distributions.items()}


def search_space(lines: Sequence[str]) -> SearchSpace:
    """The space of ``lines`` (``hydra.sweeper.params`` first, then the command line's sweep overrides)."""
    chosen: Dict[str, Any] = {}
    fixed: Dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(list(lines)):
        key = override.get_key_element()
        chosen.pop(key, None)
        fixed.pop(key, None)
        if override.is_sweep_override():
            chosen[key] = distribution_of(override)
        else:
            fixed[key] = str(override.input_line)
    return SearchSpace(distributions=chosen, fixed=list(fixed.values()))


def params_lines(params: Any) -> List[str]:
    """``hydra.sweeper.params`` as override lines."""
    return [f"{key}={value}" for key, value in (params or {}).items()]


def distribution_of(override: Override) -> Any:
    """The Optuna distribution of one sweep override; one line (``SweepRefused``) for bounds Optuna cannot draw
    from, before anything is written."""
    try:
        return _distribution(override)
    except (ValueError, ArithmeticError) as exc:  # what Hydra's range (decimal) or Optuna still refuse
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SweepRefused(
            f"{override.input_line}: Optuna cannot draw from it ({first}); see docs/launchers.md"
        ) from None


def _distribution(override: Override) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # lazy: Optuna

    value = override.value()
    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
        raise SweepRefused(f"{override.input_line}: the Optuna sweeper takes {SWEEPS} sweeps; list the options")
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        return CategoricalDistribution(list(override.sweep_iterator(transformer=Transformer.encode)))
    if override.is_range_sweep():
        _check_bounds(override.input_line, value.start, value.stop, value.step, log=False)
        if any(isinstance(bound, float) for bound in (value.start, value.stop, value.step)):
            return FloatDistribution(float(value.start), float(value.stop), step=float(value.step))
        return IntDistribution(int(value.start), int(value.stop), step=int(value.step))
    if override.is_interval_sweep():
        log = "log" in value.tags
        _check_bounds(override.input_line, value.start, value.end, None, log)
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log)
        return FloatDistribution(float(value.start), float(value.end), log=log)
    raise SweepRefused(f"{override.input_line}: the Optuna sweeper takes {SWEEPS} sweeps")


def _check_bounds(line: str, low: Any, high: Any, step: Any, log: bool) -> None:
    """One line for bounds no value can be drawn between: not finite numbers (nan, inf), the low end above the
    high one (an empty range), a step not above 0, a log scale from 0 or below."""
    bounds = [low, high] + ([] if step is None else [step])
    if not all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in bounds):
        raise SweepRefused(f"{line}: its bounds must be finite numbers (not nan or inf); give numbers such as 1e-4")
    if step is not None and step < 0:
        raise SweepRefused(f"{line}: Optuna draws a range upwards; write range({high}, {low}, {-step})")
    if step == 0:
        raise SweepRefused(f"{line}: a step of 0 never moves; give a step above 0, e.g. range({low}, {high}, 1)")
    if low > high:
        kind = "range" if step is not None else "interval"
        raise SweepRefused(f"{line}: it starts above its end, so it holds no value; write {kind}({high}, {low})")
    if log and low <= 0:
        raise SweepRefused(f"{line}: a log scale needs a low end above 0 (not {low}); e.g. interval(1e-5, {high})")


def suggest(trial: Any, key: str, distribution: Any) -> Any:
    """Optuna's public ``suggest_*`` for ``distribution``."""
    from optuna.distributions import CategoricalDistribution, IntDistribution  # lazy: Optuna

    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(key, distribution.choices)
    suggest_number = trial.suggest_int if isinstance(distribution, IntDistribution) else trial.suggest_float
    return suggest_number(key, distribution.low, distribution.high, step=distribution.step, log=distribution.log)


def grid_values(key: str, distribution: Any) -> List[Any]:
    from optuna.distributions import CategoricalDistribution  # lazy: Optuna

    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    if distribution.step is None:
        raise SweepRefused(
            f"{key}: hydra/sweeper/sampler=grid needs values to list, choice() or range(), not an interval"
        )
    count = int(round((distribution.high - distribution.low) / distribution.step)) + 1
    return [distribution.low + i * distribution.step for i in range(count)]
