# The two commands of the README's Quickstart:
#   make run    install everything (idempotent) and train on the packaged sample
#   make test   install everything (idempotent), check formatting and lint, run the test suite (CI runs this)
# and for contributors:
#   make format rewrite the code as `make lint` wants it (ruff's fixes, then its formatter)
PY := .venv/bin/python
RUFF := .venv/bin/ruff

.PHONY: install run lint format test test-slow bench
install:
	bash scripts/install.sh

run: install
	$(PY) -m cifar_dist data=sample

# ruff's settings are in pyproject.toml ([tool.ruff]); the version is pinned in setup.cfg's dev extra.
lint: install
	$(RUFF) format --check .
	$(RUFF) check .

format: install
	$(RUFF) check --fix .
	$(RUFF) format .

test: lint
	$(PY) -m pytest

test-slow: install
	$(PY) -m pytest -m slow
