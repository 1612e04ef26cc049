"""What runs beside every rank of a job, whichever launcher starts it (Horovod keeps its equivalents under
runner/common/util).

``rank_env.py`` (the environment every rank gets, the folder it logs into, a
non-chief rank's overrides), ``rank_exec.py`` (each rank's wrapper: per-rank
log, exit record, heartbeat), ``runner_supervisor.py`` (runs mpirun or
horovodrun to the end and leaves no rank behind), ``rank_failure.py`` (which
rank made the job fail), ``heartbeat.py`` (a frozen rank ends the job) and
``hosts.py`` (host lists, slots, reachability).

Nothing here imports a launcher: the launchers that start ranks
(``launchers/multirank.py``: mpirun and gloo; ``concurrent_points.py``; Slurm's
batch script, Azure ML's job) import it (``launchers/__init__.py``). No
launcher option lives here: ``launchers.option_modules`` skips a package
without a ``config.py``.
"""
