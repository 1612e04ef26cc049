"""Fixtures of the tests on the real Slurm (the cluster itself and ``tiny_data`` are the root conftest's)."""
