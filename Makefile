# podlet: every target sets itself up (scripts/setup.sh is idempotent and fast on re-runs).
PY := .venv/bin/python

.PHONY: setup run test bench

setup:
	scripts/setup.sh

run:
	scripts/setup.sh
	$(PY) examples/mlp_fashion_mnist.py

test:
	scripts/setup.sh --test
	$(PY) -m pytest tests -q

bench:
	scripts/setup.sh --test
	$(PY) bench/mlp_step.py
