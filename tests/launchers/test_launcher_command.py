"""The mpirun / horovodrun command the launchers build, checked without running MPI.

Configs are composed with Hydra's own compose API; the child overrides in the
command are parsed back with Hydra's override parser and composed again, so
"the ranks run the same job" is checked on what Hydra would really see.
"""

import os
import shlex
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate

from cifar_dist.all_options import register_configs
from cifar_dist.launchers.base import JobSpec, LaunchError
from cifar_dist.launchers.gloo import GlooLauncher
from cifar_dist.launchers.mpirun import MpirunLauncher
from cifar_dist.launchers.ranks import hosts as hosts_mod
from helpers.cli import assert_ok, run_cli

register_configs()

# A run dir with every character Hydra's override grammar cares about.
AWKWARD_DIR = "/tmp/runs/lr=1e-4,bs=32/it's a [dir]"


@pytest.fixture
def make_job():
    def make(*task_overrides, hydra_overrides=(), output_dir=AWKWARD_DIR, multirun=False):
        with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
            cfg = compose("config", overrides=list(task_overrides))
        job = JobSpec(
            cfg=cfg,
            output_dir=Path(output_dir),
            task_overrides=list(task_overrides),
            hydra_overrides=list(hydra_overrides),
            original_cwd=Path("/somewhere"),
            multirun=multirun,
        )
        return job, instantiate(cfg.launcher, _convert_="all")

    return make


def split_command(argv):
    """(runner part, wrapper part, child overrides) of a launcher command."""
    wrapper_at = argv.index("cifar_dist.launchers.ranks.rank_exec") - 2
    child_at = argv.index("--")
    assert argv[child_at + 2 : child_at + 4] == ["-m", "cifar_dist"]
    return argv[:wrapper_at], argv[wrapper_at:child_at], argv[child_at + 4 :]


def overrides_dict(overrides):
    return {o.key_or_group: o for o in OverridesParser.create().parse_overrides(overrides)}


def test_mpirun_local_command_rebuilds_the_job_in_the_same_run_dir(make_job, monkeypatch):
    monkeypatch.setattr(hosts_mod, "local_cores", lambda: 2)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    job, launcher = make_job(
        "launcher=mpirun",
        "launcher.np=2",
        "optimizer.lr=2e-4",
        "data=sample",
        hydra_overrides=["hydra.job.name=cifar_dist", "hydra.sweep.dir=/x", "hydra.mode=MULTIRUN"],
    )
    assert isinstance(launcher, MpirunLauncher)
    runner, wrapper, child = split_command(launcher.command(job))

    assert runner[:3] == ["mpirun", "-np", "2"]
    assert "--allow-run-as-root" not in runner  # only as root
    assert "-H" not in runner and "--hostfile" not in runner
    assert runner[3:7] == ["--map-by", "slot:PE=1", "--bind-to", "core"]  # np <= cores: one core each
    forwarded = [runner[i + 1] for i, a in enumerate(runner) if a == "-x"]
    assert {
        "TF_USE_LEGACY_KERAS",
        "CIFAR_DIST_CHILD",
        "PYTHONUNBUFFERED",
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
    } <= set(forwarded)
    assert all("=" not in name for name in forwarded), "values must not appear on the command line"
    i = runner.index("mpi_yield_when_idle")
    assert runner[i - 1 : i + 2] == ["--mca", "mpi_yield_when_idle", "1"]
    assert launcher.environment()["HOROVOD_CYCLE_TIME"] == "5" and "HOROVOD_CYCLE_TIME" in forwarded

    assert wrapper[0] == sys.executable and wrapper[wrapper.index("--log-dir") + 1] == f"{AWKWARD_DIR}/logs"
    assert "--bind-cores" not in wrapper  # mpirun binds

    parsed = overrides_dict(child)
    assert parsed["launcher"].value() == "local"
    assert parsed["hydra.run.dir"].value() == AWKWARD_DIR
    assert parsed["hydra.output_subdir"].value() is None
    assert parsed["optimizer.lr"].value() == 2e-4
    assert "hydra.job.name" in parsed
    assert not {"hydra.sweep.dir", "hydra.mode", "launcher.np"} & set(parsed)

    # Composing the child's overrides gives the parent's job with the in-process launcher.
    task = [o for o in child if not o.startswith("hydra")]
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        child_cfg = compose("config", overrides=task)
    assert child_cfg.launcher._target_.endswith("LocalLauncher")
    for group in ("data", "model", "optimizer", "trainer"):
        assert child_cfg[group] == job.cfg[group]


def test_ranks_other_than_zero_do_not_share_the_hydra_log_file(make_job):
    job, launcher = make_job("launcher=mpirun")
    _, wrapper, _ = split_command(launcher.command(job))
    nonchief = [a.split("=", 1)[1] for a in wrapper if a.startswith("--nonchief-arg=")]
    parsed = overrides_dict(nonchief)
    assert parsed["hydra/job_logging"].value() == "stdout"  # console only: it goes to logs/rank.N.log
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        cfg = compose("config", overrides=nonchief, return_hydra_config=True)
    assert list(cfg.hydra.job_logging.handlers) == ["console"]
    assert "%(asctime)s" in cfg.hydra.job_logging.formatters.simple.format


def test_mpirun_hosts_root_extra_args_env_and_rsh_agent(make_job, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PYTHONPATH", "/opt/extra")
    monkeypatch.setenv("MY_TOKEN_NAME", "x")
    job, launcher = make_job(
        "launcher=mpirun",
        "launcher.np=8",
        "launcher.hosts=[h1:4,h2:4]",
        "launcher.extra_args=[--mca,btl_tcp_if_include,eth0]",
        "+launcher.env.NCCL_DEBUG=INFO",
        "launcher.forward_env=[MY_TOKEN_NAME]",
        "launcher.rsh_agent=ssh -p 2222",
    )
    argv = launcher.command(job)
    runner, _, _ = split_command(argv)
    assert runner[:4] == ["mpirun", "-np", "8", "--allow-run-as-root"]
    assert runner[runner.index("-H") + 1] == "h1:4,h2:4"
    assert runner[runner.index("--bind-to") + 1] == "none"  # remote core counts unknown
    i = runner.index("plm_rsh_agent")
    assert runner[i - 1 : i + 2] == ["--mca", "plm_rsh_agent", "ssh -p 2222"]
    forwarded = [runner[i + 1] for i, a in enumerate(runner) if a == "-x"]
    assert {"PYTHONPATH", "NCCL_DEBUG", "MY_TOKEN_NAME"} <= set(forwarded)
    assert runner[-3:] == ["--mca", "btl_tcp_if_include", "eth0"]  # extra args last, before the ranks' command
    assert launcher.environment()["NCCL_DEBUG"] == "INFO"
    job, launcher = make_job("launcher=mpirun", "launcher.yield_when_idle=false", "launcher.cycle_time_ms=0")
    runner, _, _ = split_command(launcher.command(job))
    assert "mpi_yield_when_idle" not in runner and "HOROVOD_CYCLE_TIME" not in launcher.environment()


def test_mpirun_hostfile_and_oversubscribe(make_job, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=2\nnode2 slots=2 max_slots=4\n")
    job, launcher = make_job(
        "launcher=mpirun", "launcher.np=6", f"launcher.hostfile={hostfile}", "launcher.oversubscribe=true"
    )
    runner, _, _ = split_command(launcher.command(job))
    assert runner[runner.index("--hostfile") + 1] == str(hostfile)
    assert "--oversubscribe" in runner and "-H" not in runner
    assert [h.spec() for h in launcher.hosts] == ["node1:2", "node2:2"]


def test_one_rank_on_two_cores_gets_both(make_job, monkeypatch):
    monkeypatch.setattr(hosts_mod, "local_cores", lambda: 2)
    job, launcher = make_job("launcher=mpirun", "launcher.np=1")
    runner, _, _ = split_command(launcher.command(job))
    assert runner[runner.index("--map-by") + 1] == "slot:PE=2"


def test_gloo_command(make_job, tmp_path, monkeypatch):
    monkeypatch.setattr(hosts_mod, "local_cores", lambda: 2)
    job, launcher = make_job("launcher=gloo", "launcher.np=2")
    assert isinstance(launcher, GlooLauncher)
    runner, wrapper, child = split_command(launcher.command(job))
    assert runner == ["horovodrun", "--gloo", "-np", "2", "--start-timeout", "30", "-H", "localhost:2"]
    assert "--bind-cores" in wrapper  # horovodrun does not bind; the wrapper does
    assert overrides_dict(child)["launcher"].value() == "local"

    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=2\nb\n")
    job, launcher = make_job(
        "launcher=gloo", "launcher.np=3", f"launcher.hostfile={hostfile}", "launcher.extra_args=[--ssh-port,2222]"
    )
    runner, wrapper, _ = split_command(launcher.command(job))
    assert runner[runner.index("-H") + 1] == "a:2,b:1"  # horovodrun needs name:slots
    assert runner[-2:] == ["--ssh-port", "2222"]
    assert "--bind-cores" not in wrapper  # remote hosts: binding left to the user


def test_gloo_strips_horovodrun_rank_prefix(make_job):
    _, launcher = make_job("launcher=gloo")
    strip = launcher.line_filter()
    assert strip(b"[0]<stdout>:Epoch 1/2") == b"Epoch 1/2"
    assert strip(b"[12]<stderr>:oops [0]<stdout>:") == b"oops [0]<stdout>:"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["launcher.np=3"], "launcher.np=3 exceeds the 2 cores of this machine"),
        (["launcher.np=5", "launcher.hosts=[a:2,b]"], "launcher.np=5 exceeds the 3 slots"),
        (["launcher.np=0"], "launcher.np=0 must be >= 1"),
        (["launcher.mpirun=/nonexistent/mpirun"], "/nonexistent/mpirun not found on PATH; install OpenMPI"),
        (["launcher.hosts=[a:1]", "launcher.hostfile=/x"], "set launcher.hosts or launcher.hostfile, not both"),
        (["launcher.bind_to=socket"], "launcher.bind_to='socket' must be auto, core or none"),
    ],
)
def test_preflight_errors_are_one_line_and_say_what_to_do(make_job, monkeypatch, overrides, message):
    monkeypatch.setattr(hosts_mod, "local_cores", lambda: 2)
    with pytest.raises(LaunchError) as err:
        job, launcher = make_job("launcher=mpirun", *overrides)
        launcher.launch(job)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_host_that_does_not_answer_fails_before_anything_starts(make_job, tmp_path):
    agent = tmp_path / "agent"
    agent.write_text('#!/bin/sh\necho "ssh: connect to host $1 port 22: No route to host" >&2\nexit 255\n')
    agent.chmod(0o755)
    job, launcher = make_job(
        "launcher=mpirun",
        "launcher.np=2",
        "launcher.hosts=[localhost:1,node-gone:1]",
        f"launcher.rsh_agent={agent}",
        output_dir=str(tmp_path / "run"),
    )
    with pytest.raises(LaunchError) as err:
        launcher.launch(job)
    assert str(err.value).startswith("host node-gone does not answer")
    assert "No route to host" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run" / "logs").exists()  # nothing started

    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    job, launcher = make_job(
        "launcher=mpirun",
        "launcher.hosts=[node-slow:2]",
        f"launcher.rsh_agent={slow}",
        "launcher.host_check_timeout_s=1",
    )
    with pytest.raises(LaunchError, match=r"^host node-slow did not answer within 1s"):
        launcher.launch(job)


def test_cli_dry_run_prints_the_exact_command(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(
        "launcher=mpirun",
        "launcher.np=2",
        "launcher.dry_run=true",
        "data=sample",
        "optimizer.lr=3e-4",
        f"hydra.run.dir={run_dir}",
        timeout=120,
    )
    assert_ok(proc)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("mpirun ")]
    assert len(lines) == 1
    argv = shlex.split(lines[0])
    _, _, child = split_command(argv)
    parsed = overrides_dict(child)
    assert parsed["hydra.run.dir"].value() == str(run_dir)
    assert parsed["optimizer.lr"].value() == 3e-4
    assert not (run_dir / "logs").exists() and not (run_dir / "metrics.json").exists()


def test_cli_preflight_error_is_one_line_exit_2(tmp_path):
    proc = run_cli("launcher=mpirun", "launcher.np=64", "data=sample", f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert proc.returncode == 2
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "launcher.np=64 exceeds" in errors[0] and "launcher.oversubscribe=true" in errors[0]


def test_gloo_hands_horovodrun_no_secret_from_this_shell(make_job, monkeypatch):
    # horovodrun puts every variable it is given on the ranks' command lines.
    monkeypatch.setenv("AZURE_BATCHAI_STORAGE_KEY", "planted-secret-key")
    monkeypatch.setenv("SOME_TOKEN", "planted-token")
    monkeypatch.setenv("MY_SETTING", "wanted")
    _, launcher = make_job(
        "launcher=gloo", "launcher.np=2", "launcher.forward_env=[MY_SETTING]", "+launcher.env.EXTRA=1"
    )
    env = launcher.environment()
    assert "AZURE_BATCHAI_STORAGE_KEY" not in env and "SOME_TOKEN" not in env
    assert env["MY_SETTING"] == "wanted" and env["EXTRA"] == "1"
    assert env["CIFAR_DIST_CHILD"] == "1" and "PATH" in env
