"""Hydra instantiates launcher plugins only from the ``hydra_plugins`` package: this
is the name Hydra sees (``hydra/launcher=cifar_dist``). The launcher itself is
``cifar_dist.launchers.sweep_launcher``; ``registration.register()`` makes this
class and its config known to Hydra without relying on plugin discovery."""

from cifar_dist.launchers import sweep_launcher


class CifarDistLauncher(sweep_launcher.SweepLauncher):
    """The sweep launcher, under the package name Hydra requires of plugins."""
