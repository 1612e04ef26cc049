"""pytest fixtures and helpers for the Batch AI launcher tests: a running
FakeAzure, a planted storage key, and the overrides and environment that point
``python -m cifar_dist launcher=batchai`` at the fake with small polling
intervals (start it with helpers.cli's run_cli/start_cli). The fixtures are registered once by the root
conftest (pytest_plugins); test modules import only the functions."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from .server import FakeAzure

HERE = Path(__file__).resolve().parent
TESTS_DIR = HERE.parents[1]  # on a job's PYTHONPATH: helpers.fake_azure.credential
REPO = TESTS_DIR.parent


@pytest.fixture(scope="session")
def wheel_cache(tmp_path_factory) -> Path:
    """One wheel build per test session (the launcher caches by source hash)."""
    return tmp_path_factory.mktemp("batchai-cache")


@pytest.fixture
def storage_key() -> str:
    # Base64, as real account keys are (the SDK HMACs with the decoded bytes).
    return base64.b64encode(b"PLANTED-" + os.urandom(40)).decode()


@pytest.fixture
def fake_azure(tmp_path, storage_key):
    fake = FakeAzure(account="fakeacct", account_key=storage_key).start(tmp_path / "certs")
    yield fake
    fake.stop()


def launcher_overrides(fake: FakeAzure, run_dir: Path, cache: Path, **extra) -> List[str]:
    values = {
        "launcher": "batchai",
        "launcher.subscription_id": "00000000-0000-0000-0000-000000000001",
        "launcher.resource_group": "batchai.horovod",
        "launcher.location": "eastus",
        "launcher.workspace": "batchaidev",
        "launcher.cluster": "nc6cluster",
        "launcher.storage_account": fake.account,
        "launcher.create_cluster": "true",
        "launcher.node_count": "2",
        "launcher.credential": "helpers.fake_azure.credential.FakeTokenCredential",
        "launcher.arm_endpoint": fake.url,
        "launcher.file_endpoint": fake.file_endpoint,
        "launcher.poll_interval_s": "0.05",
        "launcher.retry_backoff_factor": "0.05",
        "launcher.retry_timeout_s": "20",
        "launcher.cache_dir": str(cache),
        "launcher.ssh_public_key": str(HERE / "id_test.pub"),
        "hydra.run.dir": str(run_dir),
        "debug": "fast",
    }
    values.update({k: str(v) for k, v in extra.items()})
    return [f"{k}={v}" for k, v in values.items()]


def cli_env(fake: Optional[FakeAzure], storage_key: Optional[str], **extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "FAKE_AZURE"))}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["HYDRA_FULL_ERROR"] = "0"
    if fake is not None:
        env["REQUESTS_CA_BUNDLE"] = str(fake.ca_bundle)
        env["FAKE_AZURE_TOKEN"] = fake.token
    if storage_key is not None:
        env["AZURE_BATCHAI_STORAGE_KEY"] = storage_key
    env.update(extra)
    return env
