"""The tests' shared helpers, one home each (plain functions and constants; fixtures live in the conftest.py files).

``tests/`` is on sys.path (pyproject.toml: ``pythonpath``), so test modules import ``from helpers.cli import ...``:

* ``paths``: the checkout, the shared reference data beside it, what the machine can do (tmpfs);
* ``cli``: the CLI in a subprocess (to the end or in the background), its one-line errors, waiting for a condition,
  composing the config, kill-and-resume runs, a run as a 2-task Slurm job;
* ``cifar_fixtures``: CIFAR-format data (pickles, tarballs, PNG folders) and a loopback HTTP server;
* ``slurm_cluster``: the tests' real single-node Slurm; ``slurm_jobs``: the real-Slurm tests' marks and small run;
* ``mpirun_jobs``: short real mpirun jobs and their processes; ``keras3_project``: the Keras 3 user model;
* ``user_project``: a user's own model, data and config dir, and what a run of it must show;
* ``sweep_fakes``: a recording launcher for sweeps; ``terminal_signals``: the SIGINT a terminal gives;
* ``imports_record``: a CLI run whose every process records the modules it loaded;
* ``fake_azure`` / ``fake_azureml``: local HTTPS doubles of Batch AI (ARM + File service) and Azure ML
  (``fake_azureml.small_data``: its jobs' few random images).

No test module imports another: what two modules share is here, or a fixture in a conftest.py.
"""
