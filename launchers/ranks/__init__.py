"""The multi-rank machinery the launchers share (Horovod keeps its equivalents under runner/common/util).

``multirank.py`` is what the mpirun and Gloo launchers share: N ranks of one
job in one run dir. Around it: ``rank_env.py`` (the environment every rank
gets, whichever launcher starts it), ``rank_exec.py`` (each rank's wrapper:
per-rank log, exit record, heartbeat), ``runner_supervisor.py`` (runs mpirun or
horovodrun to the end and leaves no rank behind), ``rank_failure.py`` (which
rank made the job fail), ``heartbeat.py`` (a frozen rank ends the job),
``hosts.py`` (host lists, slots, reachability) and ``concurrent_points.py``
(several sweep points in one mpirun, ``launcher.concurrent``).

No launcher option lives here: ``launchers.option_modules`` skips a package
without a ``config.py``.
"""
