"""The state of every watched Slurm job from one query per poll round.

The watch loop (``launchers/cluster_base.py``) polls each job of a sweep in turn;
every ``SlurmJob.poll()`` asks ``JobStates.info(its id)``. The first ask of a
round queries all watched jobs at once (``squeue -j a,b,c``), the others of
that round read its answer; a job asking a second time starts the next
round. So a 100-point sweep costs one ``squeue`` per ``poll_interval_s``, not
100 ``scontrol`` calls, as submitit's ``SlurmInfoWatcher`` asks ``sacct``
once for all its jobs. A job squeue does not list (finished and already
gone from its view) is asked for with ``scontrol show job`` in that round;
one Slurm has forgotten is ``None``. A failed query fails every job's poll
of that round alike (each counts its failed polls, monitor.py).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set

from cifar_dist.launchers.base import LaunchError
from cifar_dist.launchers.slurm.client import JobInfo


class JobStates:
    """One ``squeue`` per round for every job registered with ``watch``."""

    def __init__(self, client) -> None:
        self.client = client
        self._watched: List[str] = []
        self._answer: Dict[str, Optional[JobInfo]] = {}
        self._error: Optional[LaunchError] = None
        self._asked: Set[str] = set()
        self._fresh = False

    def watch(self, job_id: str) -> None:
        if job_id not in self._watched:
            self._watched.append(job_id)

    def forget(self, job_id: str) -> None:
        """A job that has ended (or was replaced by a resubmission) is not asked for again."""
        if job_id in self._watched:
            self._watched.remove(job_id)

    def info(self, job_id: str) -> Optional[JobInfo]:
        """This round's state of ``job_id`` (asking Slurm if the round is over); raises this round's error."""
        self.watch(job_id)
        new_round = job_id in self._asked  # every job asks once per round
        if not self._fresh or new_round or (job_id not in self._answer and self._error is None):
            self._refresh()
        self._asked.add(job_id)
        if self._error is not None:
            raise self._error
        return self._answer.get(job_id)

    def _refresh(self) -> None:
        self._fresh, self._asked = True, set()
        self._answer, self._error = {}, None
        try:
            self._answer = dict(self.client.states(list(self._watched)))
            for job_id in self._watched:
                if job_id not in self._answer:  # finished and no longer in squeue's view: the fallback
                    self._answer[job_id] = self.client.show(job_id)
        except LaunchError as exc:
            self._error = exc
