"""``hydra/sweeper=optuna`` under the package name Hydra requires of plugins: the plugin's
Optuna sweeper, maximising by default and keeping the study's results when trials fail.
The behaviour is in ``cifar_dist.sweepers.optuna``; without the optuna extra
this module defines nothing."""

import logging
from pathlib import Path
from typing import Any, List

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # hydra-optuna-sweeper not installed
    OptunaSweeper = None

if OptunaSweeper is not None:
    from cifar_dist.common.errors import StudyStopped
    from cifar_dist.sweepers import optuna as behaviour

    class CifarDistOptunaSweeper(OptunaSweeper):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            behaviour.warn_if_minimizing(kwargs.get("direction"))
            impl = self.sweeper
            impl.study_name = behaviour.study_name(impl.study_name)
            if impl.storage is None:  # in memory as before, but reachable when the study stops
                import optuna  # lazy: Optuna

                impl.storage = optuna.storages.InMemoryStorage()

        def setup(self, **kwargs: Any) -> None:
            super().setup(**kwargs)
            self.sweeper.launcher = behaviour.FailureTrackingLauncher(self.sweeper.launcher)

        def sweep(self, arguments: List[str]) -> None:
            impl, launcher = self.sweeper, self.sweeper.launcher
            quiet = behaviour.OneLinePerTrial()
            logging.getLogger(behaviour._IMPL_LOGGER).addFilter(quiet)
            try:
                impl.sweep(arguments)
            except Exception as exc:
                if not any(exc is failure for failure in launcher.failures):
                    raise  # not the plugin stopping the study on failed trials
                import optuna  # lazy: Optuna

                study = optuna.load_study(study_name=impl.study_name, storage=impl.storage)
                saved = behaviour.save_results(study, Path(str(impl.config.hydra.sweep.dir)))
                failures = sum(t.state == optuna.trial.TrialState.FAIL for t in study.trials)
                raise StudyStopped(
                    behaviour.stopped_message(failures, len(study.trials), impl.max_failure_rate, saved)
                ) from None
            finally:
                logging.getLogger(behaviour._IMPL_LOGGER).removeFilter(quiet)
