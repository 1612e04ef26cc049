"""A job's outputs reach the local run dir only through the one atomic writer (issue 32): a copy that
fails half-way (a full disk, a kill) leaves no half file under the output's name and no temp file
that remove_partials would not clean."""
import shutil
from pathlib import Path

import pytest

from cifar_dist.atomic_files import DiskFullError, is_temp_name
from cifar_dist.launchers.azureml import monitor
from cifar_dist.launchers.azureml.monitor import AzureMLJob


class _Workspace:
    """download_outputs as the SDK does it: the output's files under <into>/named-outputs/<name>."""

    def download_outputs(self, name, output_name, into: Path) -> Path:
        out = into / "named-outputs" / output_name
        (out / "checkpoints").mkdir(parents=True)
        (out / "metrics.json").write_text('{"test_accuracy": 0.5}\n')
        (out / "checkpoints" / "checkpoint-001.h5").write_bytes(b"x" * 4096)
        return out


def _job(run_dir: Path) -> AzureMLJob:
    return AzureMLJob(workspace=_Workspace(), name="job", output_dir=run_dir, on_interrupt="cancel",
                      stream_output=False, log_tail_lines=0)


def test_the_outputs_are_copied_into_the_run_dir(tmp_path):
    assert _job(tmp_path / "run")._download() == 2
    assert (tmp_path / "run" / "metrics.json").read_text() == '{"test_accuracy": 0.5}\n'
    assert (tmp_path / "run" / "checkpoints" / "checkpoint-001.h5").stat().st_size == 4096


def test_a_copy_that_fails_half_way_leaves_no_half_file_under_the_name(tmp_path, monkeypatch):
    def half_then_full_disk(source, dest):
        Path(dest).write_bytes(Path(source).read_bytes()[:10])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copy2", half_then_full_disk)
    run_dir = tmp_path / "run"
    with pytest.raises(DiskFullError):  # one line, not a traceback
        _job(run_dir)._download()
    left = [p for p in run_dir.rglob("*") if p.is_file()]
    assert [p.name for p in left if not is_temp_name(p.name)] == []
    assert left == []  # the failed write removed its own temp file
    assert monitor.shutil is shutil  # the patched copy is the one the download uses
