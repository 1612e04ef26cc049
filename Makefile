# The two commands of the README's Quickstart:
#   make run    install everything (idempotent) and train on the packaged sample
#   make test   install everything (idempotent) and run the test suite (CI runs this)
PY := .venv/bin/python

.PHONY: install run test test-slow bench
install:
	bash scripts/install.sh

run: install
	$(PY) -m cifar_dist data=sample

test: install
	$(PY) -m pytest

test-slow: install
	$(PY) -m pytest -m slow
