# podlet: every target sets itself up (scripts/setup.sh is idempotent and fast on re-runs).
PY := .venv/bin/python

.PHONY: setup run test bench torchvision-check

setup:
	scripts/setup.sh

run:
	scripts/setup.sh
	.venv/bin/podlet train configs/experiments/smoke.yaml

# One pytest worker per core, one test file per worker at a time (module fixtures and
# the JAX oracles' compiles are per file): the suite is mostly single-threaded.
test:
	scripts/setup.sh --test
	$(PY) -m pytest tests -q -n auto --dist loadfile --durations=30

bench:
	scripts/setup.sh --test
	$(PY) bench/peak.py
	$(PY) bench/kernels.py --dtype bfloat16
	$(PY) bench/train_step.py
	$(PY) bench/api_coverage.py

# The weight importers against the real torchvision 0.29.1 (its own ~5.5 GB venv, beside
# torch 2.14.1; the default suite checks plain-torch rebuilds of its layouts).
torchvision-check:
	scripts/setup.sh --test
	bench/setup_torchvision.sh
	$(PY) scripts/check_torchvision.py
