"""Computes the stored JAX oracles of the test suite (tests/oracles/<name>.npz) with the
installed JAX, Flax and Optax:

    .venv/bin/python tests/oracles/make_oracles.py            # all of them
    .venv/bin/python tests/oracles/make_oracles.py numpy_api  # one

Run it after changing a stored oracle's cases (its test then fails and names this
command) or after upgrading JAX. Each oracle is the module of the test that reads it,
providing oracle_outputs(), oracle_fingerprints() and oracle_versions() (see store.py).
"""
import importlib
import os
import sys
import time

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TESTS)

from oracles import store  # noqa: E402

# oracle name -> the test module that defines and reads it
ORACLES = {
    "numpy_api": "test_numpy_api",
    "pmap_seed_step": "test_pmap_train",
}


def make(name):
    mod = importlib.import_module(ORACLES[name])
    fingerprints, versions = mod.oracle_fingerprints(), mod.oracle_versions()
    t = time.time()
    outputs = mod.oracle_outputs()
    store.save(name, outputs, fingerprints, versions)
    problem = store.staleness(name, mod.oracle_fingerprints(), mod.oracle_versions())
    assert problem is None, problem
    print(f"{store.path(name)}: {len(outputs)} cases, {os.path.getsize(store.path(name)) / 1e3:.1f} kB, "
          f"computed in {time.time() - t:.0f} s")


if __name__ == "__main__":
    names = sys.argv[1:] or list(ORACLES)
    unknown = [n for n in names if n not in ORACLES]
    if unknown:
        sys.exit(f"unknown oracle(s) {unknown}; known: {sorted(ORACLES)}")
    for n in names:
        make(n)
