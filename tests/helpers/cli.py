"""The CLI as a user runs it, in a subprocess (to the end, or started in the background with the SIGINT a terminal
gives), its one-line errors, waiting for a condition, the config composed as the CLI composes it, a run's
metrics.json, the same run straight and killed then resumed, a run as a 2-task job on the tests' real Slurm, and one
of the project's scripts run as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.paths import REPO
from helpers.terminal_signals import sigint_as_in_a_terminal

# A run that prints, plots and logs nothing it does not need to.
QUIET_RUN = ("trainer.verbose=0", "trainer.plot=false", "trainer.tensorboard=false")
# Two short epochs on the packaged sample, one line per epoch (the preflight and disk-full tests' run).
QUICK_2_EPOCHS = (
    "data=sample",
    "trainer.batch_size=256",
    "trainer.epochs=2",
    "trainer.plot=false",
    "trainer.tensorboard=false",
    "trainer.verbose=2",
)


def tiny_cifar(folder: Path) -> tuple:
    """The overrides that train on the ``tiny_data`` fixture's folder (CIFAR-10's layout, nothing downloaded)."""
    return ("data=cifar10", f"data.path={folder}", "data.download=false")


# In make test's parallel pass (pytest-xdist) the workers share the cores, each mostly running a training process;
# so each process gets one TensorFlow thread (TensorFlow's own variables, which a rank honours:
# cifar_dist/training/process/threads.py), as the launcher gives each of 2 ranks on 2 cores. Two one-epoch runs side
# by side on 2 cores: 15% sooner and 12% less CPU than with 2 threads each (docs/install.md).
ONE_THREAD_PER_RUN = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def cli_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"})
    if os.environ.get("PYTEST_XDIST_WORKER"):
        env.update(ONE_THREAD_PER_RUN)
    env.pop("CIFAR_DIST_CHILD", None)
    env.update(extra)
    return env


def cli_env_with_automatic_threads(**extra: str) -> dict:
    """``cli_env`` without the parallel pass's one thread per run: for a test of the ranks' own thread plan."""
    env = cli_env(**extra)
    for name in ONE_THREAD_PER_RUN:
        env.pop(name, None)
    return env


def run_cli(
    *overrides: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600, python: str | None = None
):
    """``python -m cifar_dist <overrides>`` in a subprocess; output captured as text."""
    return subprocess.run(
        [python or sys.executable, "-m", "cifar_dist", *overrides],
        cwd=cwd or REPO,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def start_cli(
    *overrides: str,
    cwd: Path | None = None,
    env: dict | None = None,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    new_session: bool = False,
):
    """``python -m cifar_dist <overrides>`` started in the background, with the SIGINT a terminal gives it.

    stdout is a text pipe (``stdout=subprocess.DEVNULL`` for a run nobody reads while it runs); stderr goes into
    it unless ``stderr=subprocess.PIPE``; ``new_session``: its own process group, for ``os.killpg``.
    """
    return subprocess.Popen(
        [sys.executable, "-m", "cifar_dist", *overrides],
        cwd=cwd or REPO,
        env=env or cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        text=True,
        preexec_fn=sigint_as_in_a_terminal,
        start_new_session=new_session,
    )


def wait_for(condition, timeout: float, proc=None, what: str = "", interval: float = 0.2) -> None:
    """Poll ``condition`` until true; fail the test on timeout or if ``proc`` ends first (with its output's tail)."""
    deadline = time.time() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the process ended before {what}: {proc.stdout.read()[-4000:] if proc.stdout else ''}")
        if time.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(interval)


def compose_cfg(*overrides: str, **kwargs):
    """The app's config with ``overrides``, composed as ``python -m cifar_dist`` composes it (version_base 1.3)."""
    from hydra import compose, initialize_config_module

    from cifar_dist.all_options import register_configs

    register_configs()
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        return compose("config", overrides=list(overrides), **kwargs)


def run_script(name: str, *args: str, env=None, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python scripts/<name> <args>`` with this interpreter, its output captured as text."""
    command = [sys.executable, str(REPO / "scripts" / name), *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def run_benchmark(name: str, *args: str, env=None, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m benchmarks <name> <args>`` (benchmarks/catalog.py) with this interpreter, from any ``cwd``, its
    output captured as text."""
    env = dict(cli_env() if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))  # where benchmarks/ is
    command = [sys.executable, "-m", "benchmarks", name, *args]
    return subprocess.run(command, env=env, cwd=cwd or REPO, capture_output=True, text=True, timeout=timeout)


def output_of(proc) -> str:
    """A finished ``subprocess.run``'s captured stdout then stderr as text (a stream not captured counts as empty)."""
    streams = (proc.stdout, proc.stderr)
    return "".join(
        s.decode(errors="replace") if isinstance(s, bytes) else s for s in streams if isinstance(s, (str, bytes))
    )


def assert_ok(proc, output: str | None = None, tail: int = 4000):
    """Fail the test unless ``proc`` exited 0, showing the last ``tail`` characters of its output; returns ``proc``.

    The output is stdout then stderr of a ``subprocess.run`` result, or ``output`` where the caller read the streams
    itself (a ``Popen`` after ``communicate()``).
    """
    assert proc.returncode == 0, (output_of(proc) if output is None else output)[-tail:]
    return proc


def error_lines(proc) -> list:
    """The CLI's one-line errors (``cifar_dist: error: ...``) in a finished process's stderr."""
    return [line for line in proc.stderr.splitlines() if line.startswith("cifar_dist: error:")]


def one_error_line(proc) -> str:
    """The one error line of a CLI run that stopped with exit 2 and no traceback."""
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = error_lines(proc)
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def read_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def straight_and_killed_runs(
    *overrides: str,
    cwd: Path,
    tmp_path: Path,
    first_checkpoint: str,
    straight: Path | None = None,
    env: dict | None = None,
):
    """The same run twice: straight through, and killed (kill -9 of the whole command: launcher, runner, ranks) once
    ``checkpoints/<first_checkpoint>`` is written, then re-run in its run dir to resume. Both runs' metrics.json.

    ``straight``: the run dir of a finished run of the same ``overrides`` (a shared fixture's), read instead of
    starting the straight run here; ``env``: the commands' environment (``cli_env()`` by default)."""
    killed = tmp_path / "killed"
    if straight is None:
        straight = tmp_path / "straight"
        assert_ok(run_cli(*overrides, f"hydra.run.dir={straight}", cwd=cwd, env=env, timeout=600))
    run = start_cli(
        *overrides,
        f"hydra.run.dir={killed}",
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        new_session=True,
    )
    try:
        wait_for(lambda: (killed / "checkpoints" / first_checkpoint).is_file(), 400, what=f"{first_checkpoint}")
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # in the epoch after it
        run.wait()
    assert_ok(run_cli(*overrides, f"hydra.run.dir={killed}", cwd=cwd, env=env, timeout=600))
    return read_metrics(straight), read_metrics(killed)


def run_as_two_task_slurm_job(slurm, *overrides: str, cwd: Path, timeout: float = 900, **env: str):
    """``python -m cifar_dist <overrides>`` as a job of 2 tasks on the tests' real Slurm (``slurm``); skipped where
    Slurm is not installed; the finished CLI run, checked to have exited 0. ``env``: more environment for the
    command, which the job's tasks get (sbatch --export=ALL)."""
    from helpers.slurm_cluster import missing_packages

    if missing_packages():
        pytest.skip(f"Slurm not installed ({', '.join(missing_packages())})")
    try:
        proc = run_cli(
            *overrides,
            "launcher=slurm",
            "launcher.ntasks_per_node=2",
            "launcher.poll_interval_s=1",
            cwd=cwd,
            env=cli_env(SLURM_CONF=slurm.env["SLURM_CONF"], **env),
            timeout=timeout,
        )
    finally:
        slurm.cancel_all()
    return assert_ok(proc)
