"""engine=tensorflow's parts that need no training (issue 48): which engine ``engine=auto`` names for several
processes, by CPUs or GPUs; the launchers' one-line refusal without mpi4py; an MPI error as one line; and what the
engine refuses on several processes. Real launcher objects, no processes."""

from __future__ import annotations

import pytest

from cifar_dist.training.engines import choice
from cifar_dist.training.engines.world import World
from cifar_dist.training.process.threads import plan_threads

pytestmark = pytest.mark.both_stacks


@pytest.fixture
def with_tensorflow(monkeypatch):
    """``choose`` as where TensorFlow is installed (the horovod and current stacks)."""
    monkeypatch.setattr(choice, "tensorflow_installed", lambda: True)


def test_several_processes_on_cpus_train_on_tensorflow_and_with_gpus_on_jax(with_tensorflow):
    assert choice.choose(2, None) == (
        "tensorflow",
        "engine=auto: Horovod is not installed; 2 processes on CPUs train on TensorFlow, their gradients averaged "
        "over MPI",
    )
    assert choice.choose(4, None, keras=2)[0] == "tensorflow"  # Keras 2 on several processes, without Horovod
    assert choice.choose(2, None, gpus=1) == (
        "jax",
        "engine=auto: Horovod is not installed; 2 processes with GPUs train on JAX (Keras 3)",
    )
    name, why = choice.choose(2, None, keras=2, gpus=1)  # JAX trains Keras 3 only
    assert name == "tensorflow" and "Keras 2 models (engine.keras=2) on TensorFlow" in why
    assert choice.choose(1, None, gpus=1)[0] == "tensorflow"  # one GPU: one rank either way
    assert choice.choose(2, "Horovod is installed") == ("horovod", "engine=auto: Horovod is installed")


def test_one_process_over_several_gpus_trains_on_jax_a_rank_per_gpu(with_tensorflow):
    """TensorFlow trains one GPU per process: one process that has 8 would leave 7 idle, JAX trains all 8."""
    name, why = choice.choose(1, None, gpus=8)
    assert name == "jax" and "one process with 8 GPUs trains on JAX (Keras 3), a rank per GPU" in why
    assert choice.choose(1, None, keras=2, gpus=8)[0] == "tensorflow"  # Keras 2: TensorFlow (one GPU, said idle)


class FakeSlurmLike:
    def __init__(self, asked):
        self.asked = asked

    def gpus_per_process(self):
        return self.asked

    def processes(self):
        return 1


def test_the_gpus_each_process_trains_on(monkeypatch):
    monkeypatch.setattr(choice, "host_gpu_count", lambda: 2)
    assert choice.gpus_per_process(None, environ={}) == 2  # /dev/nvidia0, /dev/nvidia1
    assert choice.gpus_per_process(None, environ={"CUDA_VISIBLE_DEVICES": "1"}) == 1
    assert choice.gpus_per_process(None, environ={"CUDA_VISIBLE_DEVICES": ""}) == 0  # hidden
    assert choice.gpus_per_process(None, accelerator="cpu", environ={}) == 0  # trainer.accelerator=cpu
    assert choice.gpus_per_process(FakeSlurmLike(0), environ={}) == 0  # what the cluster job asks for
    monkeypatch.setattr(choice, "host_gpu_count", lambda: 0)
    assert choice.gpus_per_process(None, environ={}) == 0
    assert choice.gpus_per_process(FakeSlurmLike(4), environ={}) == 4
    # a CUDA_VISIBLE_DEVICES copied from elsewhere names no GPU on a host that has none (engine=auto: TensorFlow)
    assert choice.gpus_per_process(None, environ={"CUDA_VISIBLE_DEVICES": "0,1"}) == 0


def test_a_slurm_job_has_gpus_where_it_asks_for_them():
    from cifar_dist.launchers.slurm.launcher import SlurmLauncher

    assert SlurmLauncher().gpus_per_process() == 0
    assert SlurmLauncher(gpus_per_node=2).gpus_per_process() == 1  # a task per GPU (ntasks_per_node null)
    assert SlurmLauncher(gpus_per_node=4, ntasks_per_node=1).gpus_per_process() == 4  # one task over the node's 4
    assert SlurmLauncher(gres="gpu:a100:4", ntasks_per_node=2).gpus_per_process() == 2
    assert SlurmLauncher(gpus_per_task=2, ntasks_per_node=2).gpus_per_process() == 2


def test_several_processes_without_mpi4py_are_refused_in_one_line(monkeypatch):
    import importlib.util

    from cifar_dist.launchers import base
    from cifar_dist.launchers.local import LocalLauncher
    from cifar_dist.launchers.mpirun import MpirunLauncher

    found = importlib.util.find_spec
    monkeypatch.setattr(base.importlib.util, "find_spec", lambda name: None if name == "mpi4py" else found(name))
    (problem,) = MpirunLauncher(np=2).engine_problems("tensorflow")
    assert (
        problem.startswith("engine=tensorflow on 2 processes needs mpi4py where the job runs")
        and "pip install" in problem
    )
    assert LocalLauncher().engine_problems("tensorflow") == []  # one process needs no MPI


def engine(rank: int, size: int):
    from cifar_dist.training.engines.mpi_peers import OneProcess
    from cifar_dist.training.engines.tensorflow import TensorflowEngine

    return TensorflowEngine(World(rank, size, rank, size, plan_threads(size, 0, 0), "", True), OneProcess())


def test_an_mpi_error_is_one_line_naming_the_process_and_anything_else_passes():
    failed = RuntimeError(
        "Graph execution error:\n\nDetected at node mpi_allreduce_gradients defined at (most recent call last):\n"
        "  File ...\nmpi4py.MPI.Exception: MPI_ERR_PROC_FAILED: Process Failure\n\t [[{{node EagerPyFunc}}]]"
    )
    line = str(engine(0, 2).peer_failure(failed))
    assert line == (
        "process 0: another process of this 2-process TensorFlow job stopped (MPI_ERR_PROC_FAILED: Process Failure); "
        "the launcher names which one, and its log is in logs/"
    )
    assert engine(0, 2).peer_failure(ValueError("shapes (3,) and (4,) not aligned")) is None
    assert engine(0, 1).peer_failure(failed) is None  # one process has no peer: the error is its own


def test_jit_compile_on_several_processes_is_one_line():
    with pytest.raises(Exception, match="XLA cannot compile the step's MPI allreduce; use trainer.jit_compile=false"):
        engine(1, 2).check_jit_compile(True)
    engine(1, 2).check_jit_compile(False)


def test_one_process_joins_no_mpi_and_two_under_open_mpi_would(monkeypatch):
    """One process: ``OneProcess``, mpi4py not even imported (what a one-process run costs stays what it was)."""
    import sys

    from cifar_dist.training.engines import mpi_peers

    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.delenv("CIFAR_DIST_MPI_GROUP", raising=False)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # an import of it would fail
    assert isinstance(mpi_peers.join_peers(), mpi_peers.OneProcess)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    with pytest.raises(mpi_peers.MpiPeersError, match="2 processes over MPI, and mpi4py is not installed: pip install"):
        mpi_peers.join_peers()
