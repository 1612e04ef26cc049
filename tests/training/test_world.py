"""Who a process is in the job (``training/engines/world.py``): a rank is a device, and the environment a process
was started in says how many processes the job has, unless it says something no launch made."""

from __future__ import annotations

import pytest

from cifar_dist.training.engines.world import StartedOnceError, World, processes_from_env
from cifar_dist.training.process.threads import plan_threads

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]

# What `srun -n2 --pty bash` gives the shell it starts (task 0's; Slurm runs no other task in such a step), as
# the tests' real Slurm 22.05 printed it.
PTY_SHELL = {
    "SLURM_STEP_NODELIST": "localhost",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "2",
    "SLURM_PTY_PORT": "34451",
    "SLURM_TASK_PID": "12822",  # the shell's pid
}


def world(process: int, processes: int, devices: int) -> World:
    return World(process, processes, process, processes, plan_threads(processes, 0, 0), "", False, devices)


def test_a_rank_is_a_device_of_a_process():
    two_by_two = world(1, 2, 2)
    assert (two_by_two.ranks, two_by_two.first_rank, two_by_two.is_chief) == (4, 2, False)
    assert two_by_two.layout() == "2 processes x 2 devices = 4 ranks"
    assert world(0, 1, 1).layout() == "1 process x 1 device = 1 rank" and world(0, 1, 1).is_chief


def test_a_run_started_once_from_the_shell_of_a_slurm_step_of_two_tasks_is_one_line():
    with pytest.raises(StartedOnceError, match=r"^this process was started once, from the shell of a Slurm step of 2"):
        processes_from_env(PTY_SHELL, pid=13000)  # python, a child of the step's shell
    # the step's own tasks (srun -n2 python ...: the task is this process), and the ranks a launcher started
    assert processes_from_env({**PTY_SHELL, "SLURM_TASK_PID": "13000"}, pid=13000) == 2
    assert processes_from_env({**PTY_SHELL, "CIFAR_DIST_CHILD": "1"}, pid=13000) == 2
    # a step without a terminal, and a one-task one, are what they say
    assert processes_from_env({k: v for k, v in PTY_SHELL.items() if k != "SLURM_PTY_PORT"}, pid=13000) == 2
    assert processes_from_env({**PTY_SHELL, "SLURM_NTASKS": "1"}, pid=13000) == 1


def test_the_launch_is_refused_before_anything_is_written(monkeypatch):
    """launcher=local checks what its environment says when the config is validated: before Hydra writes."""
    from cifar_dist.launchers.local import LocalLauncher

    for name, value in PTY_SHELL.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CIFAR_DIST_CHILD", raising=False)
    (problem,) = LocalLauncher().engine_problems("jax")
    assert "srun -n2 python -m cifar_dist" in problem and "launcher=slurm" in problem
