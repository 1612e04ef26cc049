"""cifar_dist's benchmarks: ``python -m benchmarks`` lists them, ``python -m benchmarks NAME [ARGS...]`` runs one.

Each benchmark is a script of this folder (``catalog.py`` names them, what each measures and the doc table it
feeds); its results that the docs quote live in ``results/``. The scripts run with this folder first on
``sys.path``, as ``python benchmarks/<script>`` runs them, and import each other by their own names (hence their
``bench_`` prefix, which keeps those names off any installed package's). Run them from the checkout's root.
"""
