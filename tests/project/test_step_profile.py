"""scripts/bench_step_profile.py: the FLOP count behind the roofline, the trace reading behind the overhead numbers."""

import sys

import pytest

from helpers.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))


def test_seed_cnn_training_flops_match_a_hand_count():
    from bench_step_profile import training_flops_per_image

    from cifar_dist.models.seed_cnn import build

    # Multiply-adds of the forward pass, layer by layer (out_h * out_w * out_c * k_h * k_w * in_c; in x out).
    macs = [
        32 * 32 * 32 * 9 * 3,
        30 * 30 * 32 * 9 * 32,
        15 * 15 * 64 * 9 * 32,
        13 * 13 * 64 * 9 * 64,
        2304 * 512,
        512 * 10,
    ]
    flops = training_flops_per_image(build())
    assert flops["forward"] == 2 * sum(macs) == 41_482_240
    # Weight gradients for every layer, input gradients for all but the first.
    assert flops["backward"] == 2 * macs[0] + 4 * sum(macs[1:])
    assert flops["total"] == pytest.approx(122.7e6, rel=1e-3)


def test_trace_of_a_short_fit_gives_steps_gaps_and_op_shares(tmp_path):
    import numpy as np
    import tensorflow as tf
    from bench_step_profile import analyse_trace

    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input((8, 8, 3)),
            tf.keras.layers.Conv2D(4, 3),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(2),
        ]
    )
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


def write_trace(logdir, python_events, op_events, python_at_ns=3_000_000):
    """An XSpace as TensorFlow's profiler writes it: a /host:CPU plane with a "python" line (Keras' calls)
    and an executor line (ops as "<node>:<op type>", wrappers with "::"); events are (name, start_ms, end_ms)
    from each line's own timestamp (the python line starts python_at_ns after the executor line)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    ids = {}
    for line_name, at_ns, events in (("python", python_at_ns, python_events), ("tf_Compute", 0, op_events)):
        line = plane.lines.add(name=line_name, timestamp_ns=at_ns)
        for name, start_ms, end_ms in events:
            if name not in ids:
                ids[name] = len(ids) + 1
                plane.event_metadata[ids[name]].name = name
            line.events.add(
                metadata_id=ids[name], offset_ps=round(start_ms * 1e9), duration_ps=round((end_ms - start_ms) * 1e9)
            )
    out = logdir / "plugins" / "profile" / "run" / "host.xplane.pb"
    out.parent.mkdir(parents=True)
    out.write_bytes(space.SerializeToString())


def test_a_known_trace_gives_its_exact_steps_gaps_idle_share_and_op_shares(tmp_path):
    from bench_step_profile import analyse_trace

    # Keras calls (python line, +3 ms): absolute [3, 7] and [9, 13] ms; another function is not a step.
    calls = [("train_function", 0, 4), ("predict_function", 4, 5), ("train_function", 6, 10)]
    # Ops (absolute ms): overlapping Conv2D/MatMul busy [4, 7] once, not twice; Relu [10, 11]; a MatMul
    # running past the last call counts up to 13 only; a Conv2D before the first call is outside the window;
    # the executor wrapper ("::") spanning everything is not an op.
    ops = [
        ("conv/Conv2D:Conv2D", 4, 6),
        ("dense/MatMul:MatMul", 5, 7),
        ("relu:Relu", 10, 11),
        ("head/MatMul:MatMul", 12.5, 14),
        ("warmup/Conv2D:Conv2D", 1, 2),
        ("Executor::Run", 3, 13),
    ]
    write_trace(tmp_path, calls, ops)
    trace = analyse_trace(str(tmp_path))
    assert trace["calls"] == 2
    assert trace["call_ms_mean"] == pytest.approx(4.0) and trace["gap_between_calls_ms_mean"] == pytest.approx(2.0)
    assert trace["wall_ms"] == pytest.approx(10.0)
    busy_ms = (7 - 4) + (11 - 10) + (13 - 12.5)
    assert trace["no_op_running_fraction"] == pytest.approx(1 - busy_ms / 10)
    # Shares of all op time (Conv2D 2 + 1 ms, MatMul 2 + 1.5 ms, Relu 1 ms of 7.5 ms), largest first.
    assert list(trace["op_time_share_by_type"].items()) == [
        ("MatMul", round(3.5 / 7.5, 4)),
        ("Conv2D", round(3 / 7.5, 4)),
        ("Relu", round(1 / 7.5, 4)),
    ]
