"""Two Horovod ranks under a bare `mpirun -np 2`: the trainer itself is rank-correct.

(The mpirun launcher has its own tests; this one starts mpirun by hand so it
checks only the trainer.) Each rank records the files it creates or renames
in the run dir through a Python audit hook, so "only rank 0 writes" is
checked on what the processes actually did.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from helpers.cli import assert_ok, cli_env, read_metrics, tiny_cifar
from helpers.paths import REPO

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.horovod,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed"),
]

ARTIFACTS = ("checkpoints", "saved_models", "metrics.json", "training_log.csv", "learning_curves.png", "tensorboard")

AUDIT_HOOK = textwrap.dedent(
    """
    import atexit, json, os, sys
    _watch = os.environ["AUDIT_RUN_DIR"]
    _out = os.path.join(os.environ["AUDIT_OUT"], "rank%s.json" % os.environ.get("OMPI_COMM_WORLD_RANK", "x"))
    _writes = []
    def _hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path, mode, flags = os.fsdecode(args[0]), args[1], args[2]
            writing = (mode and any(c in str(mode) for c in "wax+")) or (flags and flags & (os.O_WRONLY | os.O_RDWR))
            if writing and path.startswith(_watch):
                _writes.append(path)
        elif event == "os.rename" and os.fsdecode(args[1]).startswith(_watch):
            _writes.append(os.fsdecode(args[1]))
    sys.addaudithook(_hook)
    atexit.register(lambda: open(_out, "w").write(json.dumps(_writes)))
    """
)


def test_two_ranks_one_writer_identical_weights_exact_test_metrics(tmp_path, tiny_data):
    run_dir, audit, hook_dir = tmp_path / "run", tmp_path / "audit", tmp_path / "hook"
    audit.mkdir()
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(AUDIT_HOOK)
    env = cli_env(
        PYTHONPATH=os.pathsep.join(filter(None, [str(hook_dir), os.environ.get("PYTHONPATH")])),
        AUDIT_RUN_DIR=str(run_dir),
        AUDIT_OUT=str(audit),
        CIFAR_DIST_CHILD="1",
    )
    cmd = ["mpirun", "-np", "2", "--bind-to", "core"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for name in ("PYTHONPATH", "AUDIT_RUN_DIR", "AUDIT_OUT", "CIFAR_DIST_CHILD", "TF_CPP_MIN_LOG_LEVEL", "PATH"):
        cmd += ["-x", name]
    cmd += [
        sys.executable,
        "-m",
        "cifar_dist",
        *tiny_cifar(tiny_data),
        "trainer.epochs=2",
        "trainer.epoch_policy=shard",
        f"hydra.run.dir={run_dir}",
        "hydra.output_subdir=null",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert_ok(proc)

    m = read_metrics(run_dir)
    assert m["ranks"] == 2 and m["complete"]
    # Averaged gradients + broadcast: both ranks end with the same weights.
    assert len(m["rank_weight_digests"]) == 2 and m["ranks_in_sync"] is True
    # shard policy: each rank walks 128 of tiny_data's 256 images per epoch.
    assert m["run"]["steps_per_epoch"] == 256 // 2 // 32

    writes = {r: json.loads((audit / f"rank{r}.json").read_text()) for r in (0, 1)}
    artifact = lambda p: os.path.relpath(p, run_dir).split(os.sep)[0] in ARTIFACTS  # noqa: E731
    assert not [p for p in writes[1] if artifact(p)], "rank 1 wrote training artifacts"
    assert any("checkpoints" in p and p.endswith("checkpoint-002.h5") for p in writes[0])
    assert any(p.endswith("metrics.json") for p in writes[0])

    # The test metrics reduced over two slices equal scoring the saved model in one process.
    import tensorflow as tf

    import cifar_dist  # noqa: F401
    from helpers.cifar_fixtures import tiny_dataset

    model = tf.keras.models.load_model(run_dir / "saved_models" / "keras_cifar10_trained_model.h5")
    data = tiny_dataset(tiny_data)
    probs = model.predict(data.x_test.astype(np.float32) / 255.0, verbose=0, batch_size=256)
    assert float((probs.argmax(axis=1) == data.y_test).mean()) == pytest.approx(m["test"]["accuracy"], abs=1e-9)
    assert m["test"]["samples"] == 64
