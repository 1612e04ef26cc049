"""cifar_dist.common.atomic_files, the one atomic writer: a failed write leaves the old file and no temp file.

* Only this program's own temp files are deleted from the run dir.
* NaN or infinity written to metrics.json becomes null: the file stays strict JSON.
* A disk that fills up while saving a checkpoint: one line naming the file and how
  to resume; earlier checkpoints stay intact and the re-run resumes. The case
  mounts a small tmpfs in a private mount namespace (``unshare -rm``: no real
  root needed where user namespaces are allowed; the mount vanishes with the process).
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cifar_dist.common.atomic_files import (
    TEMP_SUFFIX,
    atomic_path,
    atomic_write_text,
    disk_full,
    new_figure,
    remove_partials,
    save_figure,
    write_json,
)
from helpers.cli import QUICK_2_EPOCHS as QUICK
from helpers.cli import assert_ok, cli_env, one_error_line
from helpers.paths import REPO, needs_tmpfs


def test_a_figure_that_fails_to_save_leaves_the_old_file(tmp_path):
    path = tmp_path / "plot.png"
    fig = new_figure()
    fig.subplots().plot([1, 2], [3, 4])
    save_figure(fig, path)
    assert path.read_bytes().startswith(b"\x89PNG")

    before = path.read_bytes()
    with pytest.raises(ValueError):
        save_figure(new_figure(), path, dpi=-1)  # matplotlib refuses: nothing may reach plot.png
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_the_run_s_plots_are_drawn_without_pyplot(tmp_path):
    """pyplot's import is 0.1 s of every run's end, and its figures live in a global registry until closed."""
    code = (
        "import sys, pathlib; from cifar_dist.training.artifacts import plot_learning_curves as plot; "
        f"plot([{{'epoch': 1, 'loss': 2.0, 'accuracy': 0.2}}], pathlib.Path({str(tmp_path)!r}) / 'c.png'); "
        "print('matplotlib.pyplot' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False" and (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


def test_json_and_text_are_published_whole(tmp_path):
    write_json(tmp_path / "m.json", {"loss": float("nan"), "epochs": [1]})
    assert (tmp_path / "m.json").read_text() == '{\n  "loss": null,\n  "epochs": [\n    1\n  ]\n}\n'
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "m.json") as tmp:  # killed half-way: the earlier file stays
            open(tmp, "w").write('{"epochs": [')
            raise RuntimeError("killed")
    assert '"loss": null' in (tmp_path / "m.json").read_text()
    atomic_write_text(tmp_path / "sub" / "t.txt", "x")
    assert (tmp_path / "sub" / "t.txt").read_text() == "x"
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(TEMP_SUFFIX)]


def test_importing_it_loads_neither_tensorflow_nor_matplotlib():
    code = "import sys, cifar_dist.common.atomic_files; print(sorted({'tensorflow', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_only_this_programs_temp_files_are_removed(tmp_path):
    class Interrupted(Exception):
        pass

    with pytest.raises(Interrupted):
        with atomic_path(tmp_path / "metrics.json") as tmp:
            Path(tmp).write_text("half")
            leftover = Path(tmp).with_name(Path(tmp).name.replace(".metrics.json.", ".training_log.csv."))
            Path(tmp).rename(leftover)  # as if the process had been killed here
            raise Interrupted
    users = [tmp_path / ".notes.partial", tmp_path / ".draft.png", tmp_path / ".x.12345678.partial"]
    for path in users:
        path.write_text("mine")
    assert remove_partials(tmp_path) == [leftover]
    assert all(p.read_text() == "mine" for p in users)


def test_metrics_json_is_strict_json(tmp_path):
    path = tmp_path / "metrics.json"
    write_json(path, {"loss": float("nan"), "epochs": [{"val_loss": float("inf")}], "ok": 1.5})
    assert json.loads(path.read_text(), parse_constant=pytest.fail) == {
        "loss": None,
        "epochs": [{"val_loss": None}],
        "ok": 1.5,
    }


def test_the_disk_full_message_gives_advice_that_helps(tmp_path):
    message = str(disk_full(OSError(28, "No space left on device"), tmp_path / "checkpoint-003.h5"))
    assert "keep_checkpoints" not in message  # pruning happens after the new checkpoint is written
    assert "resume" in message and "checkpoint" in message
    assert "checkpoints/checkpoint-NNN.h5 can go" in message


def test_the_disk_full_hint_names_keras3_checkpoints_as_they_are_written(tmp_path):
    """Issue 37, item 11: a Keras 3 run's hint named .h5 files that do not exist."""
    for written in ("checkpoint-003.keras", ".checkpoint-003.keras.x1y2.cifar_dist.partial"):
        message = str(disk_full(OSError(28, "No space left on device"), tmp_path / written))
        assert "checkpoints/checkpoint-NNN.keras can go" in message and ".h5" not in message, message


# Inside the namespace: a 16 MiB tmpfs holds the first checkpoint (~10 MB) but
# not the second; after the failed run the tmpfs is grown and the run resumed.
DISK_FULL = textwrap.dedent(r"""
    set -u
    mount -t tmpfs -o size=16m tmpfs "$MNT" || exit 99
    "$PY" -m cifar_dist $QUICK hydra.run.dir="$MNT/run" > "$OUT/first.out" 2> "$OUT/first.err"
    echo $? > "$OUT/first.rc"
    "$PY" - "$MNT/run" > "$OUT/after.json" <<'CHECK'
    import json, sys
    from pathlib import Path
    import cifar_dist, tensorflow as tf
    run = Path(sys.argv[1])
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    for name in ckpts:
        tf.keras.models.load_model(run / "checkpoints" / name)  # raises if half-written
    metrics = json.loads((run / "metrics.json").read_text())
    print(json.dumps({"files": ckpts, "epochs": [e["epoch"] for e in metrics["epochs"]]}))
    CHECK
    mount -o remount,size=64m "$MNT"
    "$PY" -m cifar_dist $QUICK hydra.run.dir="$MNT/run" > "$OUT/second.out" 2> "$OUT/second.err"
    echo $? > "$OUT/second.rc"
    cp "$MNT/run/metrics.json" "$OUT/metrics.json"
    ls -a "$MNT/run/checkpoints" "$MNT/run/saved_models" > "$OUT/final.ls"
""")


@pytest.mark.slow  # 1.2 min; the run-dir guards' other tests stay in the default suite
@needs_tmpfs
@pytest.mark.timeout(900)
def test_disk_full_while_saving_keeps_earlier_checkpoints_and_the_rerun_resumes(tmp_path):
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    env = cli_env(MNT=str(mnt), OUT=str(out), PY=sys.executable, QUICK=" ".join(QUICK))
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", DISK_FULL],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=850,
        stdin=subprocess.DEVNULL,
    )
    assert_ok(proc)

    class First:
        returncode = int((out / "first.rc").read_text())
        stdout = (out / "first.out").read_text()
        stderr = (out / "first.err").read_text()

    line = one_error_line(First)
    assert "no space left on the device" in line and "checkpoint-002.h5" in line and "hydra.run.dir" in line
    after = json.loads((out / "after.json").read_text())
    assert after["files"] == ["checkpoint-001.h5"]  # intact, loads; the failed write left no temp file
    assert after["epochs"][0] == 1

    assert (out / "second.rc").read_text().strip() == "0", (out / "second.err").read_text()[-3000:]
    assert "resuming after epoch 1" in (out / "second.err").read_text() + (out / "second.out").read_text()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["complete"] and metrics["resumed_from_epoch"] == 1
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]
    assert "keras_cifar10_trained_model.h5" in (out / "final.ls").read_text()
