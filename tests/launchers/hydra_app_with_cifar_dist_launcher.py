"""Run a Hydra app file (argv[1]) with hydra/launcher=cifar_dist known to Hydra, as the
cifar_dist app makes it known: for Hydra's IntegrationTestSuite (test_sweep_launcher_hydra_suites.py, beside it)."""

import runpy
import sys

from hydra_plugins.cifar_dist_launcher.registration import register

if __name__ == "__main__":
    register()
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
