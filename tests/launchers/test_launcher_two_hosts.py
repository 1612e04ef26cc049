"""A real two-"host" run: two network namespaces joined by a veth pair.

The test makes namespaces A and B with link-local addresses on a veth pair of
its own (nothing else is routed), runs the launcher inside A with
``launcher.hosts=[A:1,B:1]`` and an rsh agent that, instead of ssh, enters B's
namespace (and a UTS namespace named ``host-b``) to start OpenMPI's daemon.
Rank 1 then really is on another network host: it reaches rank 0 only over
the veth pair, through OpenMPI's TCP transport. The namespaces are removed
whatever happens. Needs root and iproute2; skipped otherwise.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from helpers.cli import assert_ok, cli_env, read_metrics
from helpers.paths import REPO

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.horovod,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create network namespaces"),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("ip", "unshare", "mpirun")), reason="needs ip, unshare, mpirun"
    ),
]


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_hosts(tmp_path):
    tag = os.getpid() % 100000
    ns_a, ns_b = f"cdt_a{tag}", f"cdt_b{tag}"
    subnet = f"169.254.{20 + os.getpid() % 200}"
    addr_a, addr_b = f"{subnet}.1", f"{subnet}.2"
    created = []
    try:
        for ns in (ns_a, ns_b):
            ip("netns", "add", ns)
            created.append(ns)
        ip("link", "add", f"cdtva{tag}", "type", "veth", "peer", "name", f"cdtvb{tag}")
        for ns, dev, addr in ((ns_a, f"cdtva{tag}", addr_a), (ns_b, f"cdtvb{tag}", addr_b)):
            ip("link", "set", dev, "netns", ns)
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "set", dev, "up")
        agent = tmp_path / "netns-rsh"
        agent.write_text(
            textwrap.dedent(f"""\
            #!/bin/sh
            # Stand-in for ssh: "host" $1 is a network namespace; the rest is the
            # command string a remote shell would run.
            host="$1"; shift
            case "$host" in
              {addr_a}) ns={ns_a}; name=host-a ;;
              {addr_b}) ns={ns_b}; name=host-b ;;
              *) echo "ssh: Could not resolve hostname $host" >&2; exit 255 ;;
            esac
            exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1"; shift; eval "$*"' sh "$name" "$@"
            """)
        )
        agent.chmod(0o755)
        yield {"ns_a": ns_a, "addr_a": addr_a, "addr_b": addr_b, "subnet": f"{subnet}.0/24", "agent": str(agent)}
    finally:
        for ns in created:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # also removes the veth pair
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not any(ns in left for ns in created), "network namespace left behind"


@pytest.mark.slow  # ~40 s on an idle 2-core machine (TCP transport, two TensorFlow start-ups)
def test_two_ranks_on_two_network_hosts(two_hosts, tmp_path):
    run_dir = tmp_path / "run"
    h = two_hosts
    overrides = [
        "launcher=mpirun",
        "launcher.np=2",
        f"launcher.hosts=[{h['addr_a']}:1,{h['addr_b']}:1]",
        f"launcher.rsh_agent={h['agent']}",
        "launcher.stall_shutdown_s=60",
        # Only the veth pair exists between the "hosts": OpenMPI's TCP transport over it.
        f"launcher.extra_args=[--mca,btl,'self,tcp',--mca,btl_tcp_if_include,'{h['subnet']}',"
        f"--mca,oob_tcp_if_include,'{h['subnet']}']",
        "debug=fast",
        "trainer.epochs=1",
        "trainer.epoch_policy=shard",
        "trainer.batch_size=128",
        "trainer.plot=false",
        "trainer.verbose=2",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.run(
        ["ip", "netns", "exec", h["ns_a"], sys.executable, "-m", "cifar_dist", *overrides],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    out = proc.stdout + proc.stderr
    assert_ok(proc)
    m = read_metrics(run_dir)
    assert m["complete"] and m["ranks"] == 2 and m["ranks_in_sync"]
    rank1 = (run_dir / "logs" / "rank.1.log").read_text()
    assert "==== rank 1 (local 0/1) on host-b" in rank1  # its own host: local rank 0 of 1
    assert "rank 1/2 (local 0/1)" in rank1
    assert "-H" in out and f"{h['addr_a']}:1,{h['addr_b']}:1" in out


def test_unreachable_host_is_refused_before_start(two_hosts, tmp_path):
    proc = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            two_hosts["ns_a"],
            sys.executable,
            "-m",
            "cifar_dist",
            "launcher=mpirun",
            "launcher.np=2",
            f"launcher.hosts=[{two_hosts['addr_a']}:1,169.254.254.254:1]",
            f"launcher.rsh_agent={two_hosts['agent']}",
            "data=sample",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert "cifar_dist: error: host 169.254.254.254 does not answer" in proc.stderr
    assert not (tmp_path / "run" / "logs").exists()
