"""Fixtures of the tests on the real Slurm (the cluster itself is the root conftest's ``slurm``)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    from helpers.cifar_fixtures import batch_files, sample_batches, write_folder

    folder = tmp_path_factory.mktemp("tiny-cifar")
    write_folder(folder / "cifar-10-batches-py", batch_files(*sample_batches(per_batch=64)))
    return folder
