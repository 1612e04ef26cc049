"""pytest fixtures and helpers for the Azure ML launcher tests: a running
FakeAzureML (jobs run for real below the test's folder) and
``python -m cifar_dist launcher=azureml`` pointed at it."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest

from helpers.fake_azure.fixtures import cli_env as _base_env

from .server import FakeAzureML

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"


@pytest.fixture(scope="session")
def snapshot_cache(tmp_path_factory) -> Path:
    """One source snapshot per test session (the launcher caches it by content hash)."""
    return tmp_path_factory.mktemp("azureml-cache")


@pytest.fixture
def fake_aml(tmp_path):
    fake = FakeAzureML(node_root=tmp_path / "nodes").start(tmp_path / "certs")
    yield fake
    fake.stop()


def aml_overrides(fake: FakeAzureML, run_dir: Path, cache: Path, **extra) -> List[str]:
    values = {
        "launcher": "azureml",
        "launcher.subscription_id": SUBSCRIPTION,
        "launcher.resource_group": "cifar-rg",
        "launcher.workspace": "cifar-ws",
        "launcher.compute": "gpu-cluster",
        "launcher.create_compute": "true",
        "launcher.credential": "helpers.fake_azure.credential.FakeTokenCredential",
        "launcher.cloud": "CifarDistFake",
        "launcher.arm_endpoint": fake.url,
        "launcher.storage_endpoint": fake.storage_suffix,
        "launcher.poll_interval_s": "0.05",
        "launcher.retry_backoff_factor": "0.05",
        "launcher.cache_dir": str(cache),
        "hydra.run.dir": str(run_dir),
        "data": "sample",
        "trainer.epochs": "1",
        "trainer.verbose": "0",
    }
    values.update({k: str(v) for k, v in extra.items()})
    return [f"{k}={v}" for k, v in values.items()]


def aml_env(fake: FakeAzureML, **extra: str) -> Dict[str, str]:
    env = _base_env(fake, None)
    # The datastore's host (<account>.blob.localhost) is reached through the fake's
    # CONNECT proxy; only the fake's own address bypasses it.
    env.update(HTTPS_PROXY=fake.proxy.url, https_proxy=fake.proxy.url, NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    env.update(extra)
    return env
