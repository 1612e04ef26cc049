# The two commands of the README's Quickstart:
#   make run    install everything (idempotent) and train on the packaged sample
#   make test   install everything (idempotent), check formatting and lint, run the test suite (CI runs this);
#               where .venv holds the horovod stack, the current stack is tested too, in .venv-current
# and for contributors:
#   make format       rewrite the code as `make lint` wants it (ruff's fixes, then its formatter)
#   make install STACK=current (or horovod): pick the stack (scripts/install.sh; default: by the Python)
PY := .venv/bin/python
RUFF := .venv/bin/ruff
CURRENT := .venv-current
JAX_VENV := .venv-jax
# The jax stack's pass needs Python 3.12 or newer (JAX 0.12): pyenv's 3.12 on these machines, else python3.12,
# else python3 (Debian 13's 3.13); scripts/install.sh refuses an older one in one line.
JAX_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12) python3)
STACK ?= auto

# The suite runs in PYTEST_WORKERS pytest-xdist workers: most tests wait on a process they started (a run, its
# ranks, a real Slurm, a local Azure double), and a 2-core machine trains one run while it starts another. Each
# worker starts its own test Slurm when a test asks (own ports, state and TmpFS). The tests marked serial (they
# write the checkout's conf/local, which every other run reads) run after the others, alone. In the workers each
# run the tests start trains with one TensorFlow thread (tests/helpers/cli.py), so two side by side share the 2
# cores instead of fighting over them. Measured (2 cores): 2 workers 1.3-1.4x faster than 1; 3 workers no faster
# than 2 (docs/install.md). --dist loadgroup: a module whose module-scoped fixture trains a run marks itself
# xdist_group, so that one worker runs all its tests and trains that run once (pytest-xdist's own scheduling).
PYTEST_WORKERS ?= 2
# Each pass ends with its slowest tests (docs/install.md's table of them comes from these lines).
PYTEST_DURATIONS ?= --durations=12
PYTEST_PARALLEL = -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_DURATIONS)

.PHONY: install run lint format test test-current test-jax test-slow bench
install:
	CIFAR_DIST_STACK=$(STACK) bash scripts/install.sh

run: install
	$(PY) -m cifar_dist data=sample

# ruff's settings are in pyproject.toml ([tool.ruff]); the version is pinned in setup.cfg's dev extra.
lint: install
	$(RUFF) format --check .
	$(RUFF) check .

format: install
	$(RUFF) check --fix .
	$(RUFF) format .

# The default suite on .venv's stack (tests marked horovod skip, saying why, where Horovod is absent); then, beside
# a horovod stack, the current stack's own pass: the tests marked both_stacks (engine-independent ones, the JAX
# engine's end-to-end tests, runs without Horovod) in a venv of the newest TensorFlow, Keras and JAX; then the jax
# stack's pass: the tests marked jax_stack (engine=jax, data, the GPU choice) in a venv where TensorFlow is not
# installed at all (Python 3.12, the jax extra alone; tests/conftest.py collects only the modules that hold them).
test: lint
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow and not serial"
	$(PY) -m pytest -m "not slow and serial" || [ $$? -eq 5 ]  # 5: none selected
	@if [ "$$(cat .venv/cifar_dist_stack 2>/dev/null)" = horovod ]; then $(MAKE) --no-print-directory test-current; fi
	@$(MAKE) --no-print-directory test-jax

test-current:
	CIFAR_DIST_VENV=$(CURRENT) CIFAR_DIST_STACK=current bash scripts/install.sh
	$(CURRENT)/bin/python -m pytest $(PYTEST_PARALLEL) -m "both_stacks and not slow and not serial"
	$(CURRENT)/bin/python -m pytest -m "both_stacks and not slow and serial" || [ $$? -eq 5 ]

test-jax:
	CIFAR_DIST_VENV=$(JAX_VENV) CIFAR_DIST_STACK=jax PYTHON=$(JAX_PYTHON) bash scripts/install.sh
	$(JAX_VENV)/bin/python -m pytest $(PYTEST_PARALLEL) -m "jax_stack and not slow and not serial"

test-slow: install
	$(PY) -m pytest -m slow
