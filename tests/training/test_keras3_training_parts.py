"""The optimizers and lr schedules in Keras 3: the same steps as Keras 2's, and Horovod's lr callbacks as a schedule."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import cifar_dist  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from cifar_dist.common.keras_ops import current_lr
from cifar_dist.training import optimizers
from cifar_dist.training.recipe.schedules import Triangular, build_schedule, schedule_classes
from helpers.cli import assert_ok, cli_env

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)

STEPS = 4


def small_model(k):
    """Conv + BatchNorm + Dense with fixed layer names, so both Keras name the variables alike."""
    inputs = k.Input((6, 6, 2))
    x = k.layers.Conv2D(3, 3, name="conv")(inputs)
    x = k.layers.BatchNormalization(name="batch_normalization")(x)
    x = k.layers.Dense(2, name="dense")(k.layers.Flatten()(x))
    return k.Model(inputs, x)


def train_both(factory, lr2, lr3, scale=1.0, **kwargs):
    """The same model (same initial weights) in both Keras, STEPS steps on the same gradients; how far each
    weight moved in each, and the Keras 3 optimizer."""
    k2, k3 = small_model(tf.keras), small_model(keras)
    start = k2.get_weights()
    k3.set_weights(start)
    opt2, opt3 = factory(lr2, **kwargs), factory(lr3, keras=keras, **kwargs)
    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        grads = [(scale * rng.standard_normal(v.shape)).astype(np.float32) for v in k2.trainable_variables]
        opt2.apply_gradients(zip([tf.constant(g) for g in grads], k2.trainable_variables))
        opt3.apply_gradients(zip([keras.ops.convert_to_tensor(g) for g in grads], k3.trainable_variables))
    # The lr applied at the next step (Keras 2's current_lr leaves out its legacy decay; Keras 3's has it in the
    # schedule).
    assert current_lr(opt3) == pytest.approx(float(opt2._decayed_lr(tf.float32)), rel=1e-6)
    moved = lambda model: [w - w0 for w, w0 in zip(model.get_weights(), start)]  # noqa: E731
    return moved(k2), moved(k3), opt3


def assert_same_moves(moved2, moved3):
    """Every weight moved the same in both Keras (to float rounding: ~1e-4 of a move of ~1e-2)."""
    assert max(np.abs(m).max() for m in moved2) > 1e-3
    for a, b in zip(moved2, moved3):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "factory, kwargs, scale",
    [
        (optimizers.rmsprop, {"decay": 0.1}, 1e-4),
        (optimizers.sgd, {"decay": 0.1, "nesterov": True}, 1.0),
        (optimizers.adam, {"decay": 0.1}, 1e-4),
        (optimizers.sgdw, {"lr_multipliers": {"beta": 64.0}, "weight_decay": 0.05}, 1.0),
    ],
    ids=["rmsprop", "sgd", "adam", "sgdw"],
)
def test_each_optimizer_takes_the_same_steps_in_keras_3_as_in_keras_2(factory, kwargs, scale):
    """Gradients of 1e-4 for the adaptive ones: RMSprop's epsilon placement shows; decay=0.1: the legacy decay shows."""
    moved2, moved3, opt3 = train_both(factory, 0.01, 0.01, scale=scale, **kwargs)
    assert type(opt3).__module__.split(".")[0] in ("keras", "cifar_dist")
    assert_same_moves(moved2, moved3)


def test_sgdw_over_a_triangular_schedule_matches_keras_2_and_decays_what_keras_2_decays():
    """Names are matched with the layer's name in both Keras: excluding "dense" spares dense/kernel."""
    kwargs = dict(
        lr_multipliers={"beta": 64.0},
        weight_decay=0.05,
        exclude_from_weight_decay=["batch_normalization", "bias", "dense"],
    )
    moved2, moved3, opt3 = train_both(
        optimizers.sgdw, Triangular(0.5, 10), schedule_classes(keras).Triangular(0.5, 10), scale=0.1, **kwargs
    )
    assert_same_moves(moved2, moved3)
    names = [v.path for v in small_model(keras).trainable_variables]
    assert [n for n in names if opt3.decays_name(n)] == ["conv/kernel"]
    assert type(opt3).from_config(opt3.get_config()).lr_multipliers == {"beta": 64.0}


def test_triangular_is_the_same_schedule_in_both_keras():
    k3 = schedule_classes(keras).Triangular(0.4, 100, 0.25, 0.2, 0.05)
    k2 = Triangular(0.4, 100, 0.25, 0.2, 0.05)
    for step in (0, 10, 25, 50, 100, 150):
        assert float(k3(step)) == pytest.approx(float(k2(step)), rel=1e-6)
    assert isinstance(k3, keras.optimizers.schedules.LearningRateSchedule)
    assert keras.saving.get_registered_name(type(k3)) == "cifar_dist>Triangular"


RECORD_LR = textwrap.dedent(
    """
    import json, sys
    import cifar_dist, numpy as np, tensorflow as tf
    from cifar_dist.training.process.horovod_env import bind_horovod_to_tf_keras
    bind_horovod_to_tf_keras()  # Horovod's callbacks on tf.keras's backend, as the trainer has them
    import horovod.tensorflow.keras as hvd
    hvd.init()
    spe, epochs, lr, warmup, decays, factor = 5, 6, 0.1, 1.5, [3, 4], 0.5
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.legacy.SGD(lr, momentum=0.9), loss="mse")
    seen = []
    record = tf.keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda b, logs: seen.append(float(tf.keras.backend.get_value(model.optimizer.lr))))
    # What the trainer adds for trainer.warmup_epochs and trainer.lr_decay_epochs/lr_decay_factor (Keras 2):
    from types import SimpleNamespace
    from cifar_dist.common.keras_flavor import KERAS2
    from cifar_dist.training.engines.horovod import HorovodEngine
    t = SimpleNamespace(warmup_epochs=warmup, lr_decay_epochs=decays, lr_decay_factor=factor)
    callbacks = HorovodEngine.lr_callbacks(None, KERAS2, t, lr, spe, is_chief=False)
    model.fit(np.zeros((spe * 4, 2)), np.zeros((spe * 4, 1)), batch_size=4, epochs=epochs, verbose=0,
              callbacks=callbacks + [record])
    if hvd.rank() == 0:
        json.dump({"size": hvd.size(), "lr": seen}, open(sys.argv[1], "w"))
    """
)


@pytest.mark.horovod
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_horovod_lr_is_what_horovods_warmup_and_decay_callbacks_set_at_every_step(tmp_path):
    """2 real ranks run Horovod's callbacks on a Keras 2 model and record the lr of each batch; the Keras 3
    schedule gives the same lr at each global step: warmup over 1.5 epochs (its last value held through epoch 2),
    then the decay callbacks of epochs 3 and 4."""
    (tmp_path / "record.py").write_text(RECORD_LR)
    cmd = ["mpirun", "-np", "2", "--bind-to", "none"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    cmd += [
        "-x",
        "PYTHONPATH",
        "-x",
        "PATH",
        "-x",
        "TF_CPP_MIN_LOG_LEVEL",
        sys.executable,
        str(tmp_path / "record.py"),
        str(tmp_path / "lr.json"),
    ]
    proc = subprocess.run(cmd, env=cli_env(), capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert_ok(proc)
    recorded = json.loads((tmp_path / "lr.json").read_text())
    assert recorded["size"] == 2 and len(recorded["lr"]) == 30
    schedule = build_schedule(
        0.1,
        _no_schedule(),
        steps_per_epoch=5,
        epochs=6,
        keras=keras,
        warmup_epochs=1.5,
        decay_epochs=[3, 4],
        decay_factor=0.5,
        size=2,
    )
    ours = [float(schedule(step)) for step in range(30)]
    np.testing.assert_allclose(ours, recorded["lr"], rtol=1e-6)
    assert len(set(np.round(ours, 6))) > 10  # the warmup ramps, the decays step: a sequence worth comparing
    assert ours[10] == ours[14] == pytest.approx(0.1 * (2 / 1.5 + 1) / 2)  # epoch 2: the warmup's last value, held
    # A step decay: x0.5 from epoch 3, x0.25 from epoch 4 (Horovod would read a constant multiplier m as
    # m ** (epoch - start): the full lr in each decay's first epoch, then an exponential decay).
    assert (ours[15], ours[20], ours[25]) == pytest.approx((0.1 * 0.5, 0.1 * 0.25, 0.1 * 0.25))
    opt = optimizers.sgd(schedule, keras=keras)
    opt.iterations.assign(17)
    assert current_lr(opt) == pytest.approx(recorded["lr"][17], rel=1e-6)


def _no_schedule():
    from omegaconf import OmegaConf

    from helpers.cli import compose_cfg

    return OmegaConf.merge(compose_cfg().trainer.lr_schedule, {"kind": "none"})


@pytest.mark.parametrize(
    "factory", [optimizers.rmsprop, optimizers.sgdw, optimizers.adam], ids=["rmsprop", "sgdw", "adam"]
)
def test_keras_3_optimizers_and_schedules_train_in_fit(factory):
    """Inside Keras 3's compiled train step (graph mode): the twins' update_step, the legacy decay and HorovodLr."""
    schedule = build_schedule(
        0.01,
        _no_schedule(),
        steps_per_epoch=2,
        epochs=2,
        keras=keras,
        warmup_epochs=1,
        decay_epochs=[1],
        decay_factor=0.5,
        size=2,
    )
    model = small_model(keras)
    model.compile(optimizer=factory(schedule, keras=keras), loss="mse")
    before = model.get_weights()
    rng = np.random.default_rng(0)
    history = model.fit(rng.random((8, 6, 6, 2)), rng.random((8, 2)), batch_size=4, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all() and int(model.optimizer.iterations) == 4
    assert any(not np.allclose(a, b) for a, b in zip(model.get_weights(), before))
    assert current_lr(model.optimizer) == pytest.approx(float(schedule(4)), rel=1e-5)  # (rmsprop's decay: 4e-6)


def test_the_engine_decides_whether_the_schedule_ramps_the_lr():
    """Horovod's Keras 2 runs keep Horovod's callbacks (a plain lr they can set); Keras 3 runs, and every run
    of the one-process TensorFlow engine (no Horovod callbacks there), get the same ramps as the schedule."""
    import tensorflow as tf

    from cifar_dist.common.keras_flavor import KERAS2, KERAS3
    from cifar_dist.training.engines.horovod import HorovodEngine
    from cifar_dist.training.engines.tensorflow import TensorflowEngine
    from cifar_dist.training.recipe import hooks as recipe
    from helpers.cli import compose_cfg

    assert [HorovodEngine.ramps_lr_in_schedule(None, f) for f in (KERAS2, KERAS3)] == [False, True]
    assert [TensorflowEngine.ramps_lr_in_schedule(None, f) for f in (KERAS2, KERAS3)] == [True, True]
    t = compose_cfg("trainer.warmup_epochs=2", "trainer.lr_decay_epochs=[3]", "trainer.lr_decay_factor=0.5").trainer
    assert recipe.learning_rate(0.2, t, 10, 5) == 0.2
    lr = recipe.learning_rate(0.2, t, 10, 5, keras=keras, size=4, ramps=True)
    assert type(lr).__name__ == "HorovodLr" and (lr.size, lr.warmup_epochs, lr.decay_epochs) == (4, 2.0, [3])
    assert float(lr(0)) == pytest.approx(0.2 / 4 * ((0 + 0.1) * 3 / 2 + 1), rel=1e-6)  # Horovod's warmup formula
    keras2_lr = recipe.learning_rate(0.2, t, 10, 5, keras=tf.keras, ramps=True)
    assert isinstance(keras2_lr, tf.keras.optimizers.schedules.LearningRateSchedule)
    assert float(keras2_lr(30)) == pytest.approx(0.1, rel=1e-6)  # the step decay from epoch 3: 0.2 x 0.5
    assert isinstance(recipe.loss(0.1, keras), keras.losses.CategoricalCrossentropy)
