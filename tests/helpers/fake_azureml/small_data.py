"""A few random images in CIFAR-10's own format, as the data of the Azure ML launcher tests' jobs."""

from __future__ import annotations

from pathlib import Path

from helpers.cifar_fixtures import BATCH_DIR, batch_files, random_batches, write_folder


def small_data(tmp_path: Path) -> dict:
    """A few random images in CIFAR-10's own format: the tests are about the launcher."""
    folder = write_folder(tmp_path / "data" / BATCH_DIR, batch_files(*random_batches(2, 32, 32))).parent
    return {
        "data": "cifar10",
        "data.path": str(folder),
        "data.download": "false",
        "trainer.batch_size": "32",
        "trainer.tensorboard": "false",
        "trainer.plot": "false",
        "trainer.verbose": "2",
    }
