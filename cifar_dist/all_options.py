"""Every option of the app in Hydra's ConfigStore, before Hydra composes: the core's (``config/schema.py``,
``config/data_options.py``), every launcher's (``launchers/``), the sweep launcher and Optuna sweeper plugins
(``hydra_plugins/``), and ``--help``'s resolver.

It knows every layer, so it stands at the top with the app and the command line (``app.py``,
``__main__.py``, ``local_options.py``) that call it; the core below never imports it.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from cifar_dist.config import data_options, schema
from cifar_dist.config.option_listing import register_resolver
from cifar_dist.config.options import store_options
from cifar_dist.launchers import register_built_in
from hydra_plugins.cifar_dist_launcher.registration import register as register_plugins


def register_configs() -> None:
    """Store every built-in option and the plugins in Hydra's ConfigStore, and register --help's resolver.
    Idempotent."""
    register_resolver()  # ${cifar_dist_groups:}, --help's list of options
    ConfigStore.instance().store(name="config_schema", node=schema.Config)  # the schema of conf/config.yaml
    store_options(schema)
    store_options(data_options)  # cifar100, folder, custom
    register_built_in()  # every launcher module stores its own options
    register_plugins()  # hydra/launcher=cifar_dist, hydra/sweeper=optuna
