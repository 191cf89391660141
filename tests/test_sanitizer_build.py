"""The sanitizer builds (scripts/sanitize.sh) see what podlet's own allocators hide, and
the TSan build sees a race between podlet's threads.

ASan only watches memory it hands out itself. Under PODLET_SANITIZE=address, podlet
poisons what nobody owns in its buffer pool and memory-plan arena (cpp/podlet/sanitize.h),
and registers `sanitizer_probe`, a primitive that misbehaves on purpose. Each case here runs
one misbehaviour in a child process with its own report directory and checks that ASan
reported it, at the probe, with the kind of error expected; a well-behaved control run
reports nothing. Under PODLET_SANITIZE=thread the probe instead makes two of podlet's
worker threads add to one counter, without a lock (TSan must report a data race at the
probe) or atomically (no report): the control that makes a whole-suite TSan run with no
report mean something. In a normal build the probe must not exist (and the cases have
nothing to run: their checks need the sanitizer runtime), so there the module checks only
that.
"""
import os
import subprocess
import sys

import pytest

from podlet import _core

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import gc, sys
import numpy as np
import podlet, podlet.numpy as jnp
from podlet._src.core import bind

probe = lambda x, mode: bind("sanitizer_probe", x, mode=mode)
case = sys.argv[1]
x = np.ones(1100, np.float32)  # 4400 bytes: planned in the arena (>= 4096), not a multiple of 64
if case == "control":
    f = podlet.jit(lambda x: probe(probe(jnp.exp(x), "keep_input") + jnp.exp(x).sum(), "keep_input"))
    print(float(f(x)))
elif case == "arena_overrun":
    print(float(podlet.jit(lambda x: probe(jnp.exp(x), "overrun_output").sum())(x)))
elif case == "arena_after_lifetime":
    # exp(x)'s slot is dead once the first probe has run; the second reads it.
    print(float(podlet.jit(lambda x: probe(probe(jnp.exp(x), "keep_input"), "read_kept"))(x)))
elif case in ("race", "atomic"):
    print(float(probe(np.ones(4, np.float32), case)))
elif case == "pool_after_free":
    big = jnp.exp(np.ones(1 << 18, np.float32))  # 1 MiB: from the buffer pool
    probe(big, "keep_input")
    del big
    gc.collect()
    print(float(probe(jnp.zeros(()), "read_kept")))
"""


def run_case(case, tmp_path):
    logs = tmp_path / case
    logs.mkdir()
    env = dict(os.environ, PODLET_SANITIZE_LOGS=str(logs), PODLET_NUM_THREADS="2")
    env["ASAN_OPTIONS"] = f"log_path={logs}/asan:halt_on_error=0:detect_leaks=0"
    # sanitize.sh's TSan options (suppressions, JAX's uninstrumented threads) with this
    # case's own log directory
    tsan = [o for o in os.environ.get("TSAN_OPTIONS", "").split(":") if o and not o.startswith("log_path=")]
    env["TSAN_OPTIONS"] = ":".join([f"log_path={logs}/tsan", "halt_on_error=0"] + tsan)
    r = subprocess.run([sys.executable, "-c", CHILD, case], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    reports = "".join(p.read_text(errors="replace") for p in sorted(logs.iterdir()))
    return r, reports


needs_asan = _core.sanitizer == "address"
needs_tsan = _core.sanitizer == "thread"


def test_probe_exists_only_in_the_sanitizer_builds():
    assert _core.sanitizer in ("", "address", "thread")
    assert ("sanitizer_probe" in _core.prim_names()) == (needs_asan or needs_tsan)


@pytest.mark.parametrize("case,kind", [
    ("arena_overrun", "use-after-poison"),
    ("arena_after_lifetime", "use-after-poison"),
    ("pool_after_free", "use-after-poison"),
])
def test_asan_reports_what_podlet_allocators_hide(case, kind, tmp_path):
    if not needs_asan:
        return  # see the module docstring: only the address build has the probe
    r, reports = run_case(case, tmp_path)
    assert f"ERROR: AddressSanitizer: {kind}" in reports, (r.returncode, r.stderr[-3000:], reports[:3000])
    assert "sanitizer_probe" in reports  # the report points at the probe's kernel


def test_well_behaved_run_reports_nothing(tmp_path):
    if not needs_asan:
        return
    r, reports = run_case("control", tmp_path)
    assert r.returncode == 0 and reports == "", (r.returncode, r.stderr[-3000:], reports[:3000])


def test_tsan_reports_a_race_between_podlet_threads(tmp_path):
    if not needs_tsan:
        return  # see the module docstring: only the thread build has this probe
    r, reports = run_case("race", tmp_path)
    assert "WARNING: ThreadSanitizer: data race" in reports, (r.returncode, r.stderr[-3000:], reports[:3000])
    assert "sanitizer_probe" in reports  # the report points at the probe's kernel


def test_tsan_atomic_control_reports_nothing(tmp_path):
    if not needs_tsan:
        return
    r, reports = run_case("atomic", tmp_path)
    assert r.returncode == 0 and float(r.stdout.split()[-1]) == 2000.0 and reports == "", \
        (r.returncode, r.stderr[-3000:], reports[:3000])
