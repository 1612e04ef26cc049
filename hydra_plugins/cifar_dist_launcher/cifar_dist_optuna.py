"""``hydra/sweeper=optuna`` under the package name Hydra requires of plugins: cifar_dist's Optuna sweeper
(``cifar_dist.sweepers.optuna``), maximising the accuracy the jobs return and continuing a stored study.
Importing it imports no Optuna: the sweeper does, when a sweep starts."""

from cifar_dist.sweepers import optuna as behaviour


class CifarDistOptunaSweeper(behaviour.OptunaSweeper):
    """The Optuna sweeper, under the package name Hydra requires of plugins."""
