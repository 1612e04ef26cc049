"""Where a JAX process's Gloo listens: at the address of this host's name, or, where that name does not resolve
and every process of the job is on this host, at the loopback address.

JAX's CPU collectives (Gloo over TCP) listen at the address ``getaddrinfo`` gives for this host's name. Where the
name does not resolve (a fresh Debian root without its ``/etc/hosts`` line, some containers) a multi-process job
died as JAX created its CPU backend: Gloo's ``device.cc:99 rv == 0. -2 vs 0`` in a 20-line traceback.
``bind_gloo``, called before ``jax.distributed.initialize``, decides instead:

* the name resolves: nothing to do, Gloo listens where JAX has it listen;
* it does not, and the job's processes are all on this host: Gloo listens on ``127.0.0.1``, which every one of
  them reaches (one log line says so);
* it does not, and processes run on other hosts: one line that names the fix (the name and this host's network
  address in ``/etc/hosts`` or DNS), before anything starts.

JAX has no setting for Gloo's address: its CPU backend is made by ``xla_bridge.make_cpu_client``, which takes the
collectives to use; ``gloo_listens_at`` (common/jax_internals.py) registers that same factory with Gloo's
collectives given the loopback address (``jax._src``: private; where it is missing, the one line names the fix).
"""

from __future__ import annotations

import logging
import socket
from typing import Optional

from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.jax_internals import gloo_listens_at

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class GlooHostError(CifarDistError):
    """JAX's Gloo has no address to listen at: this host's name does not resolve."""


def unresolvable_host_name() -> Optional[str]:
    """This host's name when ``getaddrinfo`` cannot resolve it (as Gloo asks), else None."""
    name = socket.gethostname()
    try:
        socket.getaddrinfo(name, None)
    except OSError:
        return name
    return None


def bind_gloo(processes: int, local_processes: int) -> None:
    """Before ``jax.distributed.initialize`` in a job of ``processes`` processes, ``local_processes`` of them on
    this host: Gloo on loopback where this host's name does not resolve and all are here; else the one line."""
    name = unresolvable_host_name()
    if name is None or processes < 2:
        return
    if local_processes < processes:
        fix = f"add the line '<this host's network address> {name}' to /etc/hosts (or {name} to DNS) on every host"
    elif gloo_listens_at(LOOPBACK):
        log.info(
            "this host's name %r does not resolve: JAX's Gloo listens on %s (every process is here)", name, LOOPBACK
        )
        return
    else:
        fix = f"add the line '127.0.1.1 {name}' to /etc/hosts"
    raise GlooHostError(
        f"this host's name {name!r} does not resolve, and JAX's Gloo listens at its address to join the job's "
        f"{processes} processes: {fix}"
    )
