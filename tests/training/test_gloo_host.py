"""JAX's Gloo on a host whose own name does not resolve (issue 47, item 8): every process here, it listens on the
loopback address; processes on other hosts, one line names the fix (cifar_dist/training/process/gloo_host.py).

The host is made real: a UTS namespace (``unshare --uts``, root) whose host name resolves nowhere, in which two
processes join as the JAX engine joins them (``join_peers``: ``bind_gloo``, then ``jax.distributed.initialize``;
Open MPI 5's environment as launcher=mpirun sets it) and gather a number each through Gloo.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

from cifar_dist.training.process import gloo_host
from cifar_dist.training.process.gloo_host import GlooHostError, bind_gloo
from helpers.cli import cli_env
from helpers.paths import REPO

UNRESOLVABLE = "no-such-host.invalid"  # .invalid: a name no resolver answers (RFC 2606)

PROCESS = """
import logging, os
logging.basicConfig(level=logging.INFO)  # the engine's log line
os.environ["JAX_PLATFORMS"] = "cpu"
import jax
import numpy as np
from jax.experimental import multihost_utils
from cifar_dist.training.engines.jax import join_peers

join_peers(jax)  # as JaxEngine.start joins its peers
print("gathered", multihost_utils.process_allgather(np.array([jax.process_index() + 1])).ravel().tolist(), flush=True)
"""

# In the namespace: this host renamed, then two processes of one job, as launcher=mpirun starts them (Open MPI 5).
JOB = textwrap.dedent("""
    import json, os, socket, subprocess, sys
    socket.sethostname({name!r})
    env = lambda rank: {{**os.environ, "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": str(rank),
                         "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
                         "CIFAR_DIST_JAX_COORDINATOR": "127.0.0.1:{port}"}}
    procs = [subprocess.Popen([sys.executable, "-c", {process!r}], env=env(r), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    print(json.dumps([[p.wait(timeout=240), *p.communicate()] for p in procs]))
""")


def can_rename_this_host() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--uts", "hostname", UNRESOLVABLE], capture_output=True, timeout=30)
    return probe.returncode == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(not can_rename_this_host(), reason="needs unshare --uts (root) to make a host name unresolvable")
def test_jax_processes_all_on_a_host_whose_name_does_not_resolve_join_on_loopback():
    job = JOB.format(name=UNRESOLVABLE, port=free_port(), process=PROCESS)
    proc = subprocess.run(
        ["unshare", "--uts", sys.executable, "-c", job],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = json.loads(proc.stdout.strip().splitlines()[-1])
    for code, out, err in ranks:  # was: "[enforce fail at .../gloo/transport/tcp/device.cc:99] rv == 0. -2 vs 0"
        assert code == 0 and "gathered [1, 2]" in out, err[-3000:]
        assert f"this host's name '{UNRESOLVABLE}' does not resolve: JAX's Gloo listens on 127.0.0.1" in err


def test_processes_on_other_hosts_get_one_line_naming_the_fix(monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: UNRESOLVABLE)
    with pytest.raises(GlooHostError) as refused:
        bind_gloo(4, 2)
    assert str(refused.value) == (
        f"this host's name '{UNRESOLVABLE}' does not resolve, and JAX's Gloo listens at its address to join the "
        f"job's 4 processes: add the line '<this host's network address> {UNRESOLVABLE}' to /etc/hosts "
        f"(or {UNRESOLVABLE} to DNS) on every host"
    )
    monkeypatch.setattr(gloo_host, "gloo_listens_at", lambda host: False)  # a JAX whose backend cannot be given it
    with pytest.raises(GlooHostError, match=f"add the line '127.0.1.1 {UNRESOLVABLE}' to /etc/hosts$"):
        bind_gloo(2, 2)
    bind_gloo(1, 1)  # one process: no Gloo


def test_a_host_whose_name_resolves_is_left_to_jax(monkeypatch):
    monkeypatch.setattr(gloo_host, "gloo_listens_at", lambda host: pytest.fail("Gloo moved to loopback"))
    bind_gloo(4, 2)  # this machine's own name (a test machine's resolves)
