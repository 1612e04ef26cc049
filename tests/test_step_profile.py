"""scripts/bench_step_profile.py: the FLOP count behind the roofline and the trace reading behind the overhead numbers."""
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))


def test_seed_cnn_training_flops_match_a_hand_count():
    from bench_step_profile import training_flops_per_image

    from cifar_dist.models.seed_cnn import build

    # Multiply-adds of the forward pass, layer by layer (out_h * out_w * out_c * k_h * k_w * in_c; in x out).
    macs = [32 * 32 * 32 * 9 * 3, 30 * 30 * 32 * 9 * 32, 15 * 15 * 64 * 9 * 32, 13 * 13 * 64 * 9 * 64,
            2304 * 512, 512 * 10]
    flops = training_flops_per_image(build())
    assert flops["forward"] == 2 * sum(macs) == 41_482_240
    # Weight gradients for every layer, input gradients for all but the first.
    assert flops["backward"] == 2 * macs[0] + 4 * sum(macs[1:])
    assert flops["total"] == pytest.approx(122.7e6, rel=1e-3)


def test_trace_of_a_short_fit_gives_steps_gaps_and_op_shares(tmp_path):
    import numpy as np
    import tensorflow as tf
    from bench_step_profile import analyse_trace

    model = tf.keras.Sequential([tf.keras.layers.Input((8, 8, 3)), tf.keras.layers.Conv2D(4, 3),
                                 tf.keras.layers.Flatten(), tf.keras.layers.Dense(2)])
    model.compile(loss="mse", optimizer="sgd")
    x, y = np.zeros((64, 8, 8, 3), "float32"), np.zeros((64, 2), "float32")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    tf.profiler.experimental.start(str(tmp_path))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    tf.profiler.experimental.stop()
    trace = analyse_trace(str(tmp_path))
    assert trace["calls"] == 8
    assert 0 <= trace["no_op_running_fraction"] < 1
    assert trace["gap_between_calls_ms_mean"] >= 0 and trace["call_ms_mean"] > 0
    shares = trace["op_time_share_by_type"]
    assert any("Conv2D" in op for op in shares), shares
    assert all("::" not in op for op in shares)  # executor wrappers are not ops
    assert sum(shares.values()) <= 1.0 + 1e-6
