"""This rank's share of a concurrent sweep: its own MPI group, its own Horovod world.

With ``launcher=mpirun launcher.concurrent=k`` one ``mpirun`` starts k sweep
points side by side, np ranks each (``launchers/concurrent_points.py``). The per-rank
wrapper (``rank_exec --mpi-group G``) tells each rank its group through
``CIFAR_DIST_MPI_GROUP``; ``join_sweep_group`` then splits MPI_COMM_WORLD by
that colour with mpi4py and ``join_horovod`` hands the group's communicator to
``hvd.init(comm=...)``, so each point's allreduces stay inside its group.

Two marker files next to the rank's log tell the launcher how far the rank
got, which is what lets it tell "this point failed" (the other points carry
on) from "every rank is now waiting for this one" (stop the mpirun):
``rank.N.joined`` once the split is done (before it, a dead rank leaves the
others waiting in MPI_Init / the split forever), and ``rank.N.left`` when the
process ends cleanly (written before MPI_Finalize, which waits for every
group; a rank of a point with a dead rank that never writes it is stuck in a
collective with the dead one).
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cifar_dist.common.errors import CifarDistError

GROUP_ENV = "CIFAR_DIST_MPI_GROUP"  # the colour of this rank's group (set by rank_exec --mpi-group)
MARKER_ENV = "CIFAR_DIST_MPI_MARKER"  # path prefix of this rank's markers: <prefix>.joined / <prefix>.left


class SweepGroupError(CifarDistError, RuntimeError):
    pass


@dataclass(frozen=True)
class SweepGroup:
    comm: Any  # mpi4py communicator of this group: what hvd.init(comm=...) takes
    color: int
    host_ranks: int  # ranks of the whole mpirun on this host: they share its cores


def marker_path(prefix: str, state: str) -> Path:
    return Path(f"{prefix}.{state}")


def _touch(path: Path) -> None:
    try:
        path.write_text(str(os.getpid()))
    except OSError:
        pass


def join_sweep_group() -> Optional[SweepGroup]:
    """None normally; inside a concurrent sweep, this rank's group communicator.

    Collective over MPI_COMM_WORLD: every rank of the mpirun calls it once,
    early (join_horovod), with the colour its wrapper was given.
    """
    color = os.environ.get(GROUP_ENV)
    if color is None:
        return None
    try:
        from mpi4py import MPI  # lazy: mpi4py
    except ImportError:
        raise SweepGroupError(
            "launcher.concurrent needs mpi4py on every rank: pip install 'cifar_dist[mpi]' (or pip install mpi4py)"
        ) from None
    world = MPI.COMM_WORLD
    comm = world.Split(color=int(color), key=world.Get_rank())
    host_ranks = world.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
    prefix = os.environ.get(MARKER_ENV)
    if prefix:
        _touch(marker_path(prefix, "joined"))
        # Registered after mpi4py's own MPI_Finalize hook, so it runs before it
        # (atexit is last-in first-out), and after Horovod's shutdown hook.
        atexit.register(_touch, marker_path(prefix, "left"))
    return SweepGroup(comm=comm, color=int(color), host_ranks=host_ranks)
