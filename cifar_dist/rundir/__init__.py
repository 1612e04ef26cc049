"""The run dir: everything that decides whether a job may use it, before and while it runs.

``preflight.py`` checks, before Hydra creates anything, that the run (or
sweep) dir can be made and written; ``guard.py`` is the Hydra callback
(``RunDirGuard``, ``conf/hydra/default.yaml``) that, once it exists, takes
its lock (``lock.py``), refuses a folder cifar_dist did not make and marks
one it did (``owner.py``), and applies the resume policy
(``resume_policy.py``) to a re-run. ``checkpoints.py`` writes, finds and
verifies the checkpoints and the saved model in it (the trainer, the resume
policy and ``task=evaluate`` read them).
"""
