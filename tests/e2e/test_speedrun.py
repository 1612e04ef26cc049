"""experiment=speedrun on 2 real Horovod ranks, and BatchNorm statistics across ranks."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from helpers.cli import assert_ok, cli_env, read_metrics, run_cli
from helpers.paths import REPO

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.horovod,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed"),
]

# Both modes in one mpirun (each its own model, built from the same seed after a fresh Keras session, as two
# separate mpiruns would build it): one job of 2 ranks started instead of two.
BN_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import cifar_dist
    import numpy as np
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf
    from cifar_dist.models import airbench
    from cifar_dist.training.recipe.batchnorm import AverageBatchNormStatistics, moving_statistics
    from cifar_dist.training.engines.horovod import HorovodEngine
    from cifar_dist.training.engines.world import World
    from cifar_dist.training.process.threads import plan_threads

    hvd.init()
    world = World(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), plan_threads(1, 0, 0), "", False)
    engine = HorovodEngine(world)
    for mode in ("average", "off"):
        tf.keras.backend.clear_session()
        tf.keras.utils.set_random_seed(1)
        model = airbench.build(widths=[8, 8, 8])
        optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(0.01))
        model.compile(optimizer=optimizer, loss="categorical_crossentropy")
        hvd_tf.broadcast_variables(model.variables, root_rank=0)
        rng = np.random.default_rng(100 + hvd.rank())  # each rank its own images: its own batch statistics
        x = rng.random((64, 32, 32, 3)).astype(np.float32) * (1 + hvd.rank())
        y = tf.one_hot(rng.integers(0, 10, 64), 10)
        callbacks = [AverageBatchNormStatistics(engine)] if mode == "average" else []
        model.fit(x, y, epochs=1, batch_size=16, callbacks=callbacks, verbose=0)
        stats = hvd_tf.allgather_object([v.numpy() for v in moving_statistics(model)])
        trainable = hvd_tf.allgather_object([v.numpy() for v in model.trainable_variables])
        if hvd.rank() == 0:
            same = lambda parts: all(np.array_equal(a, b) for a, b in zip(parts[0], parts[1]))
            result = {"statistics": len(stats[0]), "stats_identical": same(stats)}
            result["trainable_identical"] = same(trainable)
            json.dump(result, open(os.path.join(sys.argv[1], mode + ".json"), "w"))
    """
)


def mpirun(*args, timeout=1200):
    cmd = ["mpirun", "-np", "2", "--bind-to", "core"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    cmd += ["-x", "PYTHONPATH", "-x", "TF_CPP_MIN_LOG_LEVEL", "-x", "PATH", sys.executable, *args]
    env = cli_env(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


@pytest.mark.timeout(2400)
def test_batchnorm_statistics_are_identical_across_two_ranks_after_an_epoch(tmp_path):
    script = tmp_path / "bn.py"
    script.write_text(BN_SCRIPT)
    assert_ok(mpirun(str(script), str(tmp_path)))
    results = {mode: json.loads((tmp_path / f"{mode}.json").read_text()) for mode in ("average", "off")}
    assert results["average"]["statistics"] == 12  # mean and variance of 6 BatchNorm layers
    # Gradients are averaged either way; the moving statistics only with the callback.
    assert results["off"]["trainable_identical"] and not results["off"]["stats_identical"]
    assert results["average"]["trainable_identical"] and results["average"]["stats_identical"]


@pytest.mark.timeout(2400)
def test_speedrun_on_two_ranks_learns_keeps_ranks_in_sync_and_evaluates_with_tta(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        "experiment=speedrun",
        "data=sample",
        "launcher=mpirun",
        "launcher.np=2",
        "trainer.epochs=4",
        "trainer.verbose=0",
        "trainer.tensorboard=false",
        f"hydra.run.dir={run_dir}",
        timeout=2000,
    )  # minutes on a quiet machine; generous for a loaded one
    assert_ok(proc)
    m = read_metrics(run_dir)
    assert m["complete"] and m["ranks"] == 2 and len(m["epochs"]) == 4
    # BatchNorm statistics averaged before the fingerprint: both ranks hold the same model.
    assert m["ranks_in_sync"] is True and len(set(m["rank_weight_digests"])) == 1
    assert m["run"]["model"].endswith("airbench.build") and m["run"]["lr_schedule"] == "triangular"
    # Four epochs of 2,034 images per rank: far above chance (0.10) on the 1,017 test images.
    assert m["test"]["accuracy"] > 0.35 and m["test"]["tta"] == "flip_translate"
    assert m["test_plain"]["samples"] == m["test"]["samples"] == 1017
    # A checkpoint is the job's model (BatchNorm statistics averaged before it was written), not rank 0's view.
    import h5py
    import numpy as np

    def arrays(path):
        with h5py.File(path, "r") as f:
            out = {}
            f["model_weights"].visititems(
                lambda name, obj: out.__setitem__(name, np.asarray(obj)) if isinstance(obj, h5py.Dataset) else None
            )
            return out

    last, final = (
        arrays(run_dir / "checkpoints" / "checkpoint-004.h5"),
        arrays(run_dir / "saved_models" / "keras_cifar10_trained_model.h5"),
    )
    assert last.keys() == final.keys() and any("moving_mean" in k for k in last)
    assert all(np.array_equal(last[k], final[k]) for k in last)
    # The per-step schedule (recorded at each epoch's end): its peak, 0.1 x 2 ranks, at 25 % of the
    # 4 x 31 global steps = the end of epoch 1, then falling.
    lrs = [e["lr"] for e in m["epochs"]]
    assert lrs[0] == pytest.approx(0.2) and lrs[0] > lrs[1] > lrs[2] > lrs[3]

    ev_dir = tmp_path / "eval"
    proc = run_cli(
        "task=evaluate",
        f"evaluate.model={run_dir}",
        "evaluate.tta=flip_translate",
        "data=sample",
        f"hydra.run.dir={ev_dir}",
        timeout=900,
    )
    assert_ok(proc)
    ev = json.loads((ev_dir / "evaluation.json").read_text())
    assert ev["tta"] == "flip_translate"
    # The saved model (custom layers included) loads, and scores as the trainer's final TTA test did.
    assert abs(ev["accuracy"] - m["test"]["accuracy"]) <= 2 / 1017
