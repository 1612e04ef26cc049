"""The names Hydra instantiates cifar_dist's plugins by (it takes plugins only from ``hydra_plugins/``).

Written here, below everything that needs them: the sweep launcher's and the
Optuna sweeper's configs name their class by these, and the run-dir guard
(``rundir/guard.py``) recognises a sweep that cifar_dist's sweep launcher runs
without importing the launcher.
"""

SWEEP_LAUNCHER_CLASS = "hydra_plugins.cifar_dist_launcher.cifar_dist_launcher.CifarDistLauncher"
OPTUNA_SWEEPER_CLASS = "hydra_plugins.cifar_dist_launcher.cifar_dist_optuna.CifarDistOptunaSweeper"
