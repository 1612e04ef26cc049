"""The azure-identity credential a launcher signs in with (``launcher.credential``)."""

from __future__ import annotations

from typing import Any

from hydra.utils import get_class

from cifar_dist.launchers.base import LaunchError

_CREDENTIALS = {
    "default": "azure.identity.DefaultAzureCredential",
    "cli": "azure.identity.AzureCliCredential",
    "managed_identity": "azure.identity.ManagedIdentityCredential",
    "environment": "azure.identity.EnvironmentCredential",
}


def make_credential(name: str) -> Any:
    """An azure-identity credential by short name, or any TokenCredential class by import path."""

    path = _CREDENTIALS.get(name, name)
    try:
        cls = get_class(path)
    except Exception as exc:  # hydra wraps import errors in its own types
        raise LaunchError(
            f"launcher.credential={name!r} is neither one of {sorted(_CREDENTIALS)} nor an importable class: {exc}"
        ) from None
    return cls()
