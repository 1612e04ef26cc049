"""Which GPUs an engine=jax process takes, decided from its environment before JAX starts: tested on a CPU by the
environment and the arguments JAX gets (``CUDA_VISIBLE_DEVICES``, ``JAX_PLATFORMS``, ``local_device_ids``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from cifar_dist.training.engines.jax_devices import apply_gpu_choice, check_backend, choose_gpus, use_compilation_cache
from cifar_dist.training.process.gpu_env import GpuChoiceError, host_gpu_count

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]

OPEN_MPI = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
SLURM = {"SLURM_PROCID": "1", "SLURM_STEP_NODELIST": "n1"}


def test_mpirun_ranks_on_a_host_of_four_gpus_take_two_each_by_local_rank():
    first, second = (choose_gpus(OPEN_MPI, rank, 2, host_gpus=4, accelerator="auto") for rank in (0, 1))
    assert (first.visible, second.visible) == ("0,1", "2,3")
    assert first.local_device_ids == second.local_device_ids == [0, 1]  # JAX's ids after CUDA_VISIBLE_DEVICES
    assert "local process 1 of 2 takes GPU 2,3 of 4" in second.reason


def test_the_split_follows_the_gpus_the_host_gave_the_job():
    environ = {**OPEN_MPI, "CUDA_VISIBLE_DEVICES": "5,7"}
    assert [choose_gpus(environ, rank, 2, host_gpus=8, accelerator="auto").visible for rank in (0, 1)] == ["5", "7"]


def test_slurm_tasks_given_their_own_gpus_keep_every_gpu_they_see():
    environ = {**SLURM, "SLURM_GPUS_PER_TASK": "2", "CUDA_VISIBLE_DEVICES": "2,3"}
    choice = choose_gpus(environ, 1, 2, host_gpus=4, accelerator="auto")
    assert choice.visible is None and choice.count == 2 and "--gpus-per-task" in choice.reason


def test_slurm_tasks_sharing_the_nodes_gpus_split_them_by_local_rank():
    environ = {**SLURM, "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert choose_gpus(environ, 1, 4, host_gpus=4, accelerator="auto").visible == "1"


def test_one_process_takes_every_gpu_it_sees():
    choice = choose_gpus({}, 0, 1, host_gpus=8, accelerator="auto")
    assert choice.visible is None and choice.count == 8 and choice.local_device_ids == list(range(8))


def test_slurm_tasks_given_the_nodes_gpus_by_gres_split_them_and_say_what_is_left_idle():
    """--gres=gpu:8 with 3 tasks a node: each task sees the node's 8; they take 2 each, and say 2 are idle."""
    environ = {**SLURM, "SLURM_LOCALID": "2", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    choice = choose_gpus(environ, 2, 3, host_gpus=8, accelerator="auto")
    assert choice.visible == "4,5" and choice.local_device_ids == [0, 1]
    assert "2 idle: start a number of processes per host that divides 8" in choice.reason


def test_gpus_the_host_does_not_have_are_one_line_and_none_on_a_host_without_gpus():
    with pytest.raises(GpuChoiceError, match=r"^CUDA_VISIBLE_DEVICES='0,5' names GPU 5, but this host has 2 "):
        choose_gpus({"CUDA_VISIBLE_DEVICES": "0,5"}, 0, 1, host_gpus=2, accelerator="auto")
    uuids = {"CUDA_VISIBLE_DEVICES": "GPU-8b2a,GPU-77c1"}  # UUIDs (and MIG names) are taken as they are
    assert choose_gpus(uuids, 0, 1, host_gpus=2, accelerator="auto").count == 2
    copied = {"CUDA_VISIBLE_DEVICES": "0,1"}  # set on a host with no NVIDIA GPU: no GPU, whatever it says
    choice = choose_gpus(copied, 0, 1, host_gpus=0, accelerator="auto")
    assert choice.count == 0 and "training on the CPU" in choice.reason


def test_more_processes_than_gpus_on_a_host_is_one_line():
    with pytest.raises(GpuChoiceError, match=r"^4 processes on this host but 2 GPU\(s\).*start at most 2 per host"):
        choose_gpus(OPEN_MPI, 3, 4, host_gpus=2, accelerator="auto")


def test_no_gpu_trains_on_the_cpu_unless_gpus_were_asked_for():
    environ: dict = {}
    choice = choose_gpus(environ, 0, 1, host_gpus=0, accelerator="auto")
    apply_gpu_choice(choice, environ)
    assert choice.count == 0 and environ == {"JAX_PLATFORMS": "cpu"} and "training on the CPU" in choice.reason
    with pytest.raises(GpuChoiceError, match=r"^trainer.accelerator=gpu, but process 0 sees no GPU"):
        choose_gpus({}, 0, 1, host_gpus=0, accelerator="gpu")
    with pytest.raises(GpuChoiceError, match="sees no GPU"):
        choose_gpus({"CUDA_VISIBLE_DEVICES": ""}, 0, 1, host_gpus=4, accelerator="gpu")


def test_accelerator_cpu_hides_the_gpus_from_jax():
    environ: dict = {}
    apply_gpu_choice(choose_gpus({}, 0, 1, host_gpus=4, accelerator="cpu"), environ)
    assert environ == {"CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}


def test_a_cpu_only_jaxlib_where_gpus_were_asked_for_is_one_line(caplog):
    fake_jax = SimpleNamespace(default_backend=lambda: "cpu", __version__="0.12.0")
    choice = choose_gpus({}, 0, 1, host_gpus=1, accelerator="gpu")
    with pytest.raises(GpuChoiceError, match=r"install JAX's CUDA plugin \(pip install 'jax\[cuda13\]==0.12.0'\)"):
        check_backend(fake_jax, choice, "gpu")
    # auto: the CPU will do, said in one line
    with caplog.at_level(logging.WARNING, logger="cifar_dist.training.engines.jax_devices"):
        assert check_backend(fake_jax, choose_gpus({}, 0, 1, host_gpus=1, accelerator="auto"), "auto") == "cpu"
    assert "this host has 1 GPU(s), but JAX 0.12.0 found none (no CUDA plugin): training on the cpu" in caplog.text


def test_the_hosts_gpus_are_counted_by_their_device_files(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps"):
        (tmp_path / name).touch()
    assert host_gpu_count(tmp_path) == 2


def test_the_compilation_cache_goes_where_the_config_says_and_jaxs_own_setting_wins(tmp_path):
    updates = {}
    fake_jax = SimpleNamespace(config=SimpleNamespace(update=lambda key, value: updates.__setitem__(key, value)))
    assert use_compilation_cache(fake_jax, str(tmp_path / "mine"), environ={}) == str(tmp_path / "mine")
    assert updates["jax_compilation_cache_dir"] == str(tmp_path / "mine")
    assert updates["jax_persistent_cache_min_compile_time_secs"] == 0.0
    theirs = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "theirs")}
    assert use_compilation_cache(fake_jax, str(tmp_path / "mine"), environ=theirs) == str(tmp_path / "theirs")
    assert use_compilation_cache(fake_jax, "", environ={}) is None


def test_a_device_out_of_memory_is_one_line_saying_what_to_change():
    from cifar_dist.training.engines.jax_fit import DeviceOutOfMemory, out_of_memory_in_one_line

    xla_says = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 81604378624 bytes.\nBufferAssignment: ..."
    with pytest.raises(DeviceOutOfMemory) as caught:
        with out_of_memory_in_one_line("training"):
            raise RuntimeError(xla_says)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("the device ran out of memory while training (RESOURCE_EXHAUSTED")
    assert "lower trainer.batch_size" in line and "data.placement=stream" in line and "re-run to resume" in line
    with pytest.raises(ValueError, match="^something else$"):  # any other error passes as it is
        with out_of_memory_in_one_line("training"):
            raise ValueError("something else")
