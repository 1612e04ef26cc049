"""Make cifar_dist's Hydra plugins known to Hydra: ``hydra/launcher=cifar_dist`` (the sweep launcher, the
project's default) and ``hydra/sweeper=optuna`` (maximising the accuracy the jobs return).

Explicit, because Hydra's discovery of ``hydra_plugins`` misses setuptools editable installs (Hydra issues
#2359, #3252). It lives beside the shims: they import the behaviour they wrap, so what registers them
stands above both (the app calls ``register()``, ``cifar_dist/all_options.py``)."""

from hydra.core.plugins import Plugins

from cifar_dist.config.options import store_options
from cifar_dist.launchers import sweep_launcher
from cifar_dist.sweepers import optuna as optuna_sweeper
from hydra_plugins.cifar_dist_launcher import cifar_dist_optuna
from hydra_plugins.cifar_dist_launcher.cifar_dist_launcher import CifarDistLauncher


def register() -> None:
    """The sweep launcher's config (again: idempotent) and class; the Optuna sweeper's when its plugin is installed."""
    store_options(sweep_launcher)
    Plugins.instance().register(CifarDistLauncher)
    sweeper = getattr(cifar_dist_optuna, "CifarDistOptunaSweeper", None)  # None without the optuna extra
    if sweeper is not None:
        Plugins.instance().register(sweeper)  # scans hydra_plugins first (once per process)
        optuna_sweeper.store_config()  # after the scan, which re-registers the plugin's own config
