"""Sweepers: how the points of a sweep (``-m``) are chosen, beside the launchers that run them.

Hydra splits a sweep into a sweeper (which points, in which batches) and a
launcher (how each batch runs: ``launchers/sweep_launcher.py``). cifar_dist
uses Hydra's basic sweeper as is; ``optuna.py`` is ``hydra/sweeper=optuna``,
cifar_dist's own Optuna sweeper (maximise the test accuracy, keep the study's
results when trials fail, continue a stored study), with its settings
(``optuna_config.py``), its search space (``optuna_space.py``) and its study
(``optuna_study.py``). Installed as ``cifar_dist.sweepers``; the class Hydra
instantiates is the shim in ``hydra_plugins/cifar_dist_launcher/``.
"""
