"""The processes of an engine=tensorflow job, and what they exchange: one process alone, or several over MPI.

``join_peers`` is called once, in the engine's start. One process (no
launcher said there are more) gets ``OneProcess``: every collective is the
identity and mpi4py is never imported, so a one-process run costs what it
always did. Several processes (Open MPI's ``mpirun``, Slurm's ``srun
--mpi=pmix``, Azure ML's MPI jobs: whatever started them set MPI's
environment) join MPI through mpi4py (``MpiPeers``): this process's rank,
the processes on its host (its local rank: which GPU it takes, how many
threads it gets), and the collectives of the engine seam, each one MPI call
on one contiguous buffer: ``bcast``/``allgather`` of pickled Python objects,
``Allreduce`` of float arrays (their sum, divided by the size on every
process alike, so that every process holds the same bytes).

Inside a concurrent sweep (``launcher.concurrent``) the communicator is the
sweep point's group (``process/mpi_groups.py``), as Horovod's world is.

MPI is asked for ``MPI_THREAD_SERIALIZED``: the gradients' allreduce runs in
one of TensorFlow's threads (``mpi_gradients.py``), the other collectives in
the main thread between steps, never two at once.
"""

from __future__ import annotations

import os
import re
from typing import Any, List, Optional, Sequence

import numpy as np

from cifar_dist.common.errors import CifarDistError
from cifar_dist.training.engines.world import processes_from_env
from cifar_dist.training.process.mpi_groups import GROUP_ENV, join_sweep_group

MPI_HINT = "pip install mpi4py (cifar_dist's mpi extra) where the job runs"

# An MPI error as mpi4py raises it (``MPI_ERR_PROC_FAILED: ...``), also inside TensorFlow's error of a step.
_MPI_ERROR = re.compile(r"\bMPI_ERR_[A-Z_]+\b[^\n]*")


class MpiPeersError(CifarDistError, RuntimeError):
    """The processes of this job cannot reach each other over MPI."""


class OneProcess:
    """The one process of a one-process job: every collective is the identity."""

    rank, size, local_rank, local_size, host_ranks = 0, 1, 0, 1, 1

    def broadcast_object(self, obj: Any) -> Any:
        return obj

    def allgather_object(self, obj: Any) -> List[Any]:
        return [obj]

    def any(self, flag: bool) -> bool:
        return bool(flag)

    def mean_arrays(self, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
        return [np.asarray(a) for a in arrays]

    def broadcast_arrays(self, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
        return [np.asarray(a) for a in arrays]

    def sum_in_place(self, flat: np.ndarray) -> np.ndarray:
        return flat


class MpiPeers:
    """This process among several, over an mpi4py communicator (the whole job's, or its sweep group's)."""

    def __init__(self, comm, host_ranks: Optional[int] = None):
        from mpi4py import MPI  # lazy: mpi4py (join_peers chose its thread level)

        self.MPI = MPI
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        host = comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)  # the job's processes on this host
        self.local_rank, self.local_size = host.Get_rank(), host.Get_size()
        host.Free()
        self.host_ranks = host_ranks or self.local_size  # every process sharing this host's cores
        self._float16_sum = None  # the MPI operation that adds float16 (trainer.compression=fp16), made once

    def broadcast_object(self, obj: Any) -> Any:
        return self.comm.bcast(obj, root=0)

    def allgather_object(self, obj: Any) -> List[Any]:
        return self.comm.allgather(obj)

    def any(self, flag: bool) -> bool:
        return bool(self.comm.allreduce(bool(flag), op=self.MPI.LOR))

    def sum_in_place(self, flat: np.ndarray) -> np.ndarray:
        """The sum over the processes of a contiguous 1-D array, written into it: one ``Allreduce`` (float16,
        which MPI cannot add, by a user-defined operation on its 16-bit words)."""
        if flat.dtype == np.float16:
            self._float16_sum = self._float16_sum or self.MPI.Op.Create(_add_float16, commute=True)
            self.comm.Allreduce(self.MPI.IN_PLACE, [flat.view(np.uint16), self.MPI.UINT16_T], op=self._float16_sum)
        else:
            self.comm.Allreduce(self.MPI.IN_PLACE, flat, op=self.MPI.SUM)
        return flat

    def mean_arrays(self, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
        """Each array's mean over the processes, in one ``Allreduce`` per dtype (one fused buffer); the same bytes
        on every process (the same sum, divided alike)."""

        def mean(flat):
            self.sum_in_place(flat)
            flat /= flat.dtype.type(self.size)
            return flat

        return _fused(arrays, mean)

    def broadcast_arrays(self, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
        """Rank 0's arrays, on every process: one ``Bcast`` per dtype."""

        def bcast(flat):
            self.comm.Bcast(flat, root=0)
            return flat

        return _fused(arrays, bcast)


def _fused(arrays: Sequence[np.ndarray], reduce) -> List[np.ndarray]:
    """``reduce`` applied to the arrays of each dtype as one contiguous buffer (a copy), split back."""
    arrays = [np.asarray(a) for a in arrays]
    result: List[Optional[np.ndarray]] = [None] * len(arrays)
    for dtype in dict.fromkeys(a.dtype for a in arrays):
        members = [i for i, a in enumerate(arrays) if a.dtype == dtype]
        flat = reduce(np.concatenate([arrays[i].ravel() for i in members]))
        offset = 0
        for i in members:
            result[i] = flat[offset : offset + arrays[i].size].reshape(arrays[i].shape)
            offset += arrays[i].size
    return result


def _add_float16(inbuf, inoutbuf, datatype) -> None:
    """MPI's user function: ``inoutbuf += inbuf``, both float16 arrays sent as 16-bit words."""
    out = np.frombuffer(inoutbuf, np.float16)
    out += np.frombuffer(inbuf, np.float16)


def join_peers():
    """``OneProcess`` where the launcher started one process; else this process's ``MpiPeers`` (MPI_Init)."""
    started = processes_from_env()
    if started <= 1 and GROUP_ENV not in os.environ:
        return OneProcess()
    try:
        import mpi4py  # lazy: mpi4py
    except ImportError:
        raise MpiPeersError(
            f"engine=tensorflow averages the gradients of {started} processes over MPI, "
            f"and mpi4py is not installed: {MPI_HINT}"
        ) from None
    mpi4py.rc.thread_level = "serialized"  # (module docstring); read by the import below, which calls MPI_Init
    group = join_sweep_group()
    if group is not None:
        return MpiPeers(group.comm, group.host_ranks)
    from mpi4py import MPI  # lazy: mpi4py

    peers = MpiPeers(MPI.COMM_WORLD)
    if peers.size != started:  # e.g. srun without --mpi=pmix: every process would be an MPI world of its own
        raise MpiPeersError(
            f"the launcher started {started} processes, but MPI joins {peers.size} of them: start them with mpirun, "
            "or with srun --mpi=pmix (launcher=slurm does), so that MPI sees the whole job"
        )
    return peers


def mpi_error_line(exc: BaseException) -> Optional[str]:
    """The MPI error ``exc`` carries (``MPI_ERR_...: ...``, its first line), or None for any other error."""
    found = _MPI_ERROR.search(str(exc))
    return found.group(0).strip()[:200] if found else None
