"""Every private API of JAX (``jax._src``) cifar_dist relies on, in one place.

JAX has no public way to do these; each function says which private thing it uses. A JAX release that removes or
changes one fails the test named after it (tests/common/test_private_apis.py), and the fix is here. Nothing else in
the project imports ``jax._src`` (tests/project/test_structure.py). JAX is imported only inside the functions.
"""

from __future__ import annotations

import logging

BACKEND_LOGGER = "jax._src.xla_bridge"  # the logger of JAX's backend set-up: the private module's own name


def quiet_backend_probing() -> None:
    """Keep JAX's notes on the backends it probed and did not find ("Unable to initialize backend 'tpu'") out of
    the run's log: the INFO lines of ``jax._src.xla_bridge``'s logger."""
    logging.getLogger(BACKEND_LOGGER).setLevel(logging.WARNING)


def gloo_listens_at(host: str) -> bool:
    """Make JAX's CPU backend as JAX makes it, its Gloo collectives listening at ``host`` (JAX has no setting for
    it); False where this JAX cannot (collectives other than Gloo, a backend already made, an API this code does
    not know). Relies on ``jax._src.lib._jax.make_gloo_tcp_collectives(distributed_client=, hostname=)``,
    ``jax._src.distributed.global_state.client`` (the job's client, once ``jax.distributed.initialize`` ran),
    ``jax._src.xla_bridge.make_cpu_client(collectives=)`` and ``xla_bridge.register_backend_factory``."""
    try:
        import jax  # lazy: JAX (the engine has imported it)
        from jax._src import distributed, xla_bridge  # lazy: JAX's own CPU backend factory and its peers' client
        from jax._src.lib import _jax  # lazy: JAX's Gloo collectives, which take the address to listen at
    except ImportError:
        return False
    if jax.config.jax_cpu_collectives_implementation != "gloo" or not hasattr(_jax, "make_gloo_tcp_collectives"):
        return False

    def cpu_client():
        collectives = _jax.make_gloo_tcp_collectives(distributed_client=distributed.global_state.client, hostname=host)
        return xla_bridge.make_cpu_client(collectives=collectives)

    try:
        xla_bridge.register_backend_factory("cpu", cpu_client, priority=0, fail_quietly=False)
    except (AttributeError, RuntimeError):  # RuntimeError: the CPU backend exists already
        return False
    return True


def exchange_before_backend(jax, key: str, value: str) -> list:
    """Every process's ``value`` under ``key``, in process order, through the coordination service that
    ``jax.distributed.initialize`` started: usable before any backend (and its collectives) exists. JAX has no
    public key-value API: relies on ``jax._src.distributed.global_state.client`` and its ``key_value_set`` and
    ``blocking_key_value_get(key, timeout_in_ms)``."""
    from jax._src import distributed  # lazy: JAX (the coordination service's client)

    client, me = distributed.global_state.client, jax.process_index()
    client.key_value_set(f"{key}/{me}", value)
    timeout_ms = 10 * 60 * 1000  # every process gets here once it has joined: they joined together
    return [client.blocking_key_value_get(f"{key}/{p}", timeout_ms) for p in range(jax.process_count())]
