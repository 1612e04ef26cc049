"""Make cifar_dist's Hydra plugins known to Hydra: ``hydra/launcher=cifar_dist`` (the sweep launcher, the
project's default) and ``hydra/sweeper=optuna`` (cifar_dist's Optuna sweeper and its samplers).

Explicit, because Hydra's discovery of ``hydra_plugins`` misses setuptools editable installs (Hydra issues
#2359, #3252). It lives beside the shims: they import the behaviour they wrap, so what registers them
stands above both (the app calls ``register()``, ``cifar_dist/all_options.py``)."""

from hydra.core.plugins import Plugins

from cifar_dist.config.options import store_options
from cifar_dist.launchers import sweep_launcher
from cifar_dist.sweepers import optuna_config
from hydra_plugins.cifar_dist_launcher.cifar_dist_launcher import CifarDistLauncher
from hydra_plugins.cifar_dist_launcher.cifar_dist_optuna import CifarDistOptunaSweeper


def register() -> None:
    """The sweep launcher's and the Optuna sweeper's configs (again: idempotent) and classes."""
    store_options(sweep_launcher)
    Plugins.instance().register(CifarDistLauncher)
    Plugins.instance().register(CifarDistOptunaSweeper)  # scans hydra_plugins first (once per process)
    # After the scan: a hydra-optuna-sweeper left installed stores its own hydra/sweeper=optuna there.
    store_options(optuna_config)
