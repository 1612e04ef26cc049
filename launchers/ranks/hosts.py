"""Where the ranks of a multi-process launch go: host lists, slots, reachability.

Shared by the mpirun and Gloo launchers so that both understand
``launcher.hosts=[h1:4,h2:4]`` and ``launcher.hostfile=...`` the same way and
refuse, before anything starts, a launch that cannot work (more ranks than
slots, a host that does not answer).
"""

from __future__ import annotations

import os
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from cifar_dist.common.errors import LaunchError
from cifar_dist.common.external_commands import LOCAL_QUERY_TIMEOUT_S, CommandTimedOut, run_command

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "localhost.localdomain"}


@dataclass(frozen=True)
class Host:
    name: str
    slots: Optional[int]  # None: not given (mpirun then assumes 1 for -H, cores for a hostfile)

    def spec(self) -> str:
        """``name:slots`` as mpirun -H and horovodrun -H take it."""
        return self.name if self.slots is None else f"{self.name}:{self.slots}"


def local_cores() -> int:
    """Cores this process may use: what a local launch can bind ranks to."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def parse_host(spec: str) -> Host:
    """``name`` or ``name:slots`` (IPv6 addresses in brackets: ``[fd00::1]:2``)."""
    text = str(spec).strip()
    if not text:
        raise LaunchError("empty entry in launcher.hosts; write launcher.hosts=[host1:slots,host2:slots]")
    name, slots = text, None
    if text.startswith("["):
        end = text.find("]")
        name, rest = text[1:end], text[end + 1 :]
        if rest.startswith(":"):
            slots = rest[1:]
    elif text.count(":") == 1:
        name, slots = text.split(":")
    if slots is not None:
        if not slots.isdigit() or int(slots) < 1:
            raise LaunchError(f"bad slot count in launcher.hosts entry {spec!r}; write host:slots with slots >= 1")
        return Host(name, int(slots))
    return Host(name, None)


def parse_hostfile(path: Path) -> List[Host]:
    """OpenMPI hostfile lines: ``name [slots=N] [max_slots=M]``, ``#`` comments."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LaunchError(f"cannot read launcher.hostfile {path}: {exc.strerror}; pass an existing file") from None
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        slots = None
        for field_ in fields[1:]:
            key, _, value = field_.partition("=")
            if key in ("slots", "cpu") and value.isdigit():
                slots = int(value)
        if slots is not None and slots < 1:
            raise LaunchError(f"{path}:{number}: slots must be >= 1")
        hosts.append(Host(fields[0], slots))
    if not hosts:
        raise LaunchError(f"launcher.hostfile {path} names no host; add lines like 'node1 slots=4'")
    return hosts


def resolve_hosts(hosts: Sequence[str], hostfile: Optional[str]) -> List[Host]:
    """The configured hosts, or [] for "this machine only"."""
    if hosts and hostfile:
        raise LaunchError("set launcher.hosts or launcher.hostfile, not both")
    if hostfile:
        return parse_hostfile(Path(hostfile).expanduser())
    return [parse_host(h) for h in hosts]


def is_local(name: str) -> bool:
    """True for names that mean this machine (no remote shell needed)."""
    if name in LOCAL_NAMES:
        return True
    own = {socket.gethostname(), socket.getfqdn()}
    if name in own or name.split(".")[0] == socket.gethostname().split(".")[0]:
        return True
    try:
        return name in _local_addresses()
    except OSError:
        return False


def _local_addresses() -> set:
    """Addresses of this machine's interfaces (Linux: from `ip -o addr`)."""
    try:  # best effort: without the list, a host counts as remote by name
        out = run_command(
            ["ip", "-o", "addr"], "listing this machine's addresses", "check `ip -o addr`", LOCAL_QUERY_TIMEOUT_S
        ).stdout
    except (OSError, CommandTimedOut):
        return set()
    found = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[2] in ("inet", "inet6"):
            found.add(parts[3].split("/")[0])
    return found


def total_slots(hosts: Sequence[Host], unknown_slots: int = 1) -> int:
    return sum(h.slots if h.slots is not None else unknown_slots for h in hosts)


def check_slots(np: int, hosts: Sequence[Host], oversubscribe: bool) -> None:
    """Refuse more ranks than slots (one slot per core when running locally)."""
    if np < 1:
        raise LaunchError(f"launcher.np={np} must be >= 1")
    if oversubscribe:
        return
    if not hosts:
        cores = local_cores()
        if np > cores:
            raise LaunchError(
                f"launcher.np={np} exceeds the {cores} cores of this machine; lower launcher.np, "
                "add hosts (launcher.hosts=[host:slots,...]) or set launcher.oversubscribe=true"
            )
        return
    slots = total_slots(hosts)
    if np > slots:
        listed = ",".join(h.spec() for h in hosts)
        raise LaunchError(
            f"launcher.np={np} exceeds the {slots} slots of the hosts ({listed}; a host without :slots counts 1); "
            "lower launcher.np, give more slots (host:slots) or set launcher.oversubscribe=true"
        )


def check_reachable(hosts: Sequence[Host], remote_shell: Sequence[str], timeout_s: float) -> None:
    """Run ``true`` on every remote host through the remote shell the launcher will use.

    ``remote_shell`` is the command prefix (e.g. ``ssh -o BatchMode=yes``, or
    the configured rsh agent); the host name and ``true`` are appended.
    """
    for host in hosts:
        if is_local(host.name):
            continue
        argv = [*remote_shell, host.name, "true"]
        try:
            proc = run_command(
                argv,
                f"host {host.name}",
                "check the name, the network and passwordless ssh, or drop it from launcher.hosts",
                timeout_s,
                error=LaunchError,
            )
        except FileNotFoundError:
            raise LaunchError(
                f"remote shell {remote_shell[0]!r} not found; install openssh-client or set launcher.rsh_agent"
            ) from None
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise LaunchError(
                f"host {host.name} does not answer ({shlex.join(argv)} exited {proc.returncode}"
                f"{': ' + detail[-1] if detail else ''}); check the name and passwordless ssh "
                f"(ssh {host.name} true), or drop it from launcher.hosts"
            )
