from setuptools import setup

# All metadata lives in setup.cfg; this file exists for tools that still call setup.py.
setup()
