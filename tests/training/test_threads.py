"""Per-rank CPU thread plans: N ranks on N cores must not oversubscribe."""

import pytest

from cifar_dist.training.process import threads


def _machine(monkeypatch, cores, visible):
    for name in (
        threads.ENV_INTRA_OP,
        threads.ENV_INTER_OP,
    ):  # the suite's own runs may set them (tests/helpers/cli.py)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(threads, "available_cores", lambda: visible)


def test_unbound_ranks_split_the_machine(monkeypatch):
    _machine(monkeypatch, cores=8, visible=8)
    assert threads.plan_threads(local_size=1).intra_op == 8
    plan = threads.plan_threads(local_size=4)
    assert (plan.intra_op, plan.inter_op) == (2, 2)
    assert threads.plan_threads(local_size=16).intra_op == 1


def test_bound_rank_uses_its_cores(monkeypatch):
    # mpirun --bind-to core: the affinity mask is the rank's share already.
    _machine(monkeypatch, cores=2, visible=1)
    plan = threads.plan_threads(local_size=2)
    assert (plan.intra_op, plan.inter_op) == (1, 1)
    assert "bound" in plan.reason


def test_explicit_settings_win(monkeypatch):
    _machine(monkeypatch, cores=2, visible=2)
    plan = threads.plan_threads(local_size=2, intra_op=3, inter_op=4)
    assert (plan.intra_op, plan.inter_op) == (3, 4)


def test_tensorflows_own_variables_win_over_the_share_and_lose_to_the_trainers_settings(monkeypatch):
    _machine(monkeypatch, cores=8, visible=8)
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "3")
    plan = threads.plan_threads(local_size=1)
    assert (plan.intra_op, plan.inter_op) == (1, 3)
    assert plan.reason == "8 cores / 1 local rank(s), TF_NUM_INTRAOP_THREADS=1, TF_NUM_INTEROP_THREADS=3"
    plan = threads.plan_threads(local_size=1, intra_op=4)
    assert (plan.intra_op, plan.inter_op) == (4, 3) and "INTRAOP" not in plan.reason
    # As TensorFlow reads them: a value that is not a positive integer is ignored.
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "two")
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "0")
    assert threads.plan_threads(local_size=2) == threads.ThreadPlan(4, 2, 8, "8 cores / 2 local rank(s)")


def test_each_rank_takes_the_gpu_of_its_local_rank_and_its_share_of_the_cores(monkeypatch):
    """The one GPU and thread set-up of the TensorFlow-run engines (process/tf_devices.py), on a stand-in
    TensorFlow with two GPUs (this machine has none): memory growth on every GPU, only the rank's own visible,
    the pools sized by the host's ranks; a third rank on the host is one line."""
    import sys
    from types import SimpleNamespace

    from cifar_dist.training.process.tf_devices import GpuCountError, use_gpu_and_threads

    calls = []
    gpus = [SimpleNamespace(name=f"/physical_device:GPU:{i}") for i in range(2)]
    fake_tf = SimpleNamespace(
        __version__="2.x",
        config=SimpleNamespace(
            list_physical_devices=lambda kind: gpus if kind == "GPU" else [],
            experimental=SimpleNamespace(set_memory_growth=lambda gpu, on: calls.append(("growth", gpu.name, on))),
            set_visible_devices=lambda gpu, kind: calls.append(("visible", getattr(gpu, "name", gpu), kind)),
            threading=SimpleNamespace(
                set_intra_op_parallelism_threads=lambda n: calls.append(("intra", n)),
                set_inter_op_parallelism_threads=lambda n: calls.append(("inter", n)),
            ),
        ),
    )
    monkeypatch.setitem(sys.modules, "tensorflow", fake_tf)
    monkeypatch.setattr(threads, "available_cores", lambda: 8)

    gpu, plan = use_gpu_and_threads(1, 2, 4, 0, 0)
    assert gpu == "/physical_device:GPU:1" and plan == threads.plan_threads(4, 0, 0)
    assert calls == [
        ("growth", "/physical_device:GPU:0", True),
        ("growth", "/physical_device:GPU:1", True),
        ("visible", "/physical_device:GPU:1", "GPU"),
        ("intra", plan.intra_op),
        ("inter", plan.inter_op),
    ]
    with pytest.raises(GpuCountError, match="3 ranks on this host but 2 GPU"):
        use_gpu_and_threads(2, 3, 3)
    calls.clear()
    assert use_gpu_and_threads(0, 1, 1, accelerator="cpu")[0] == ""  # trainer.accelerator=cpu: hidden
    assert calls[0] == ("visible", [], "GPU")
    gpus.clear()
    assert use_gpu_and_threads(0, 1, 1)[0] == ""
    with pytest.raises(GpuCountError, match=r"^trainer.accelerator=gpu, but TensorFlow 2.x sees no GPU here"):
        use_gpu_and_threads(0, 1, 1, accelerator="gpu")


def test_one_process_on_a_host_of_several_gpus_says_the_others_are_idle_and_how_to_use_them(caplog):
    """A rank is a device; these engines train one GPU per process: 1 process on a host of 4 leaves 3 idle."""
    from cifar_dist.training.process.tf_devices import idle_gpus_line

    line = idle_gpus_line("tensorflow", 1, 4)
    assert line.startswith("this host has 4 GPUs and engine=tensorflow trains one per process")
    assert "3 idle; train on all of them with launcher=mpirun launcher.np=4" in line
    assert idle_gpus_line("horovod", 4, 4) is None and idle_gpus_line("horovod", 2, 1) is None


def test_a_slurm_task_given_its_own_gpu_takes_it_whatever_its_local_rank():
    """--gpus-per-task=1: each task sees only its own GPU (Slurm binds CUDA_VISIBLE_DEVICES), so local rank 1 takes
    the one it sees, not a second it does not have; a task given 2 leaves one idle and says so."""
    from cifar_dist.training.process.tf_devices import gpu_of, idle_gpus_line

    assert gpu_of(1, 2, 1, "auto", "2.x", own=True) == 0
    with pytest.raises(Exception, match="2 ranks on this host but 1 GPU"):
        gpu_of(1, 2, 1, "auto", "2.x", own=False)  # sharing the node's one GPU: one line
    assert "1 idle in each; give each task one (launcher.gpus_per_task=1)" in idle_gpus_line("horovod", 2, 2, own=True)
    assert idle_gpus_line("horovod", 2, 1, own=True) is None
