"""A job's files and outputs reach the local run dir only through the one atomic writer (issue 32): a copy that
fails half-way (a full disk, a kill) leaves no half file under the output's name and no temp file
that remove_partials would not clean."""

import ast
import shutil
from pathlib import Path

import pytest

from cifar_dist.common.atomic_files import DiskFullError, is_temp_name
from cifar_dist.launchers.azureml import monitor
from cifar_dist.launchers.azureml.monitor import AzureMLJob
from helpers.paths import REPO


class _Workspace:
    """download_outputs as the SDK does it: the output's files under <into>/named-outputs/<name>."""

    def download_outputs(self, name, output_name, into: Path) -> Path:
        out = into / "named-outputs" / output_name
        (out / "checkpoints").mkdir(parents=True)
        (out / "metrics.json").write_text('{"test_accuracy": 0.5}\n')
        (out / "checkpoints" / "checkpoint-001.h5").write_bytes(b"x" * 4096)
        return out


def _job(run_dir: Path) -> AzureMLJob:
    return AzureMLJob(
        workspace=_Workspace(),
        name="job",
        output_dir=run_dir,
        on_interrupt="cancel",
        stream_output=False,
        log_tail_lines=0,
    )


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


def whole_file_writes(path: Path) -> list:
    """``.write_text``/``.write_bytes`` calls and ``open`` in a writing mode other than append, on anything
    but a temp file of atomic_path (named ``tmp``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("write_text", "write_bytes"):
            found.append(f"line {node.lineno}: .{node.func.attr}")
        elif isinstance(node.func, ast.Name) and node.func.id == "open" and len(node.args) > 1:
            mode, target = node.args[1], node.args[0]
            writes = isinstance(mode, ast.Constant) and "w" in str(mode.value)
            if writes and not (isinstance(target, ast.Name) and target.id == "tmp"):
                found.append(f"line {node.lineno}: open(..., {mode.value!r})")
    return found


def test_the_launchers_write_whole_files_only_through_the_atomic_writer():
    """Job files (job.sbatch, job.yml, job.json, the Slurm job id) and downloads: a kill never leaves half of one.
    Logs are appended to, not written whole."""
    launchers = REPO / "launchers"
    sources = sorted(launchers.rglob("*.py"))
    assert len(sources) > 40
    found = {str(p.relative_to(launchers)): whole_file_writes(p) for p in sources}
    assert {path: writes for path, writes in found.items() if writes} == {}


def test_the_check_sees_a_plain_write(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f(p, tmp):\n    p.write_text('x')\n    open(p, 'w')\n    open(tmp, 'wb')\n    open(p, 'ab')\n"
    )
    assert whole_file_writes(module) == ["line 2: .write_text", "line 3: open(..., 'w')"]


def test_a_folder_built_by_a_concurrent_twin_stays_and_a_real_failure_is_raised(tmp_path):
    from cifar_dist.common.atomic_files import publish_dir

    staged, target = tmp_path / "staged", tmp_path / "by-hash"
    staged.mkdir()
    (staged / "a").write_text("mine")
    publish_dir(staged, target)
    assert (target / "a").read_text() == "mine" and not staged.exists()
    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / "a").write_text("twin's, same content hash")
    publish_dir(twin, target)  # the twin got there first: no error, the first folder stays
    assert (target / "a").read_text() == "mine"
    with pytest.raises(OSError):
        publish_dir(tmp_path / "never-built", tmp_path / "other")
