#!/usr/bin/env bash
# Runs the test suite against a sanitizer build of the C++ core.
#
#   scripts/sanitize.sh address [pytest args...]   # ASan + UBSan
#   scripts/sanitize.sh thread  [pytest args...]   # TSan
#
# Builds podlet._core with -DPODLET_SANITIZE=<kind> into build/sanitize-<kind> (its own
# directory; the installed build is untouched), then runs pytest with that core
# (PODLET_CORE_DIR), the sanitizer runtime preloaded into the uninstrumented Python, and
# scripts/sanitize_plugin.py, which fails the test that caused any report. Without a test
# path among the pytest args it runs the subset below; pass `tests` to run everything.
# Exits non-zero on any report or failure; ends with pytest's summary and the report
# count. Reports are kept in build/sanitize-<kind>/logs. Suppressions for third-party
# runtimes, each with its reason: scripts/sanitize-<kind>.supp. PODLET_SANITIZE_BUILD=0
# runs the existing build as it is.
#
# Under ASan the allocators stop hiding memory (cpp/podlet/sanitize.h): pooled buffers, the
# slack after every buffer's requested size and memory-plan arena slots outside their
# value's lifetime are poisoned.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
kind="${1:-}"
case "$kind" in
  address|thread) shift ;;
  *) echo "usage: scripts/sanitize.sh address|thread [pytest args...]" >&2; exit 2 ;;
esac
scripts/setup.sh --test --deps-only >/dev/null  # the editable install is not needed
PY="$ROOT/.venv/bin/python"
BUILD="$ROOT/build/sanitize-$kind"
LOGS="$BUILD/logs"

# --- build ---------------------------------------------------------------------------
export PATH="$ROOT/.venv/bin:$PATH"
if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPODLET_SANITIZE="$kind" \
    -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" >/dev/null
fi
if [[ "${PODLET_SANITIZE_BUILD:-1}" != 0 ]]; then  # 0: run the build as it is
  echo "[sanitize] building the core with $kind sanitizer in $BUILD"
  cmake --build "$BUILD" -j "$(nproc)"
fi

# --- run -----------------------------------------------------------------------------
rm -rf "$LOGS" && mkdir -p "$LOGS"
export PODLET_CORE_DIR="$BUILD" PODLET_SANITIZE_LOGS="$LOGS"
# This checkout's Python package with the sanitized core, whatever the venv's editable
# install points at: its import hook steps aside for build dirs listed in
# SKBUILD_EDITABLE_SKIP.
export PYTHONPATH="$ROOT/python:$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}"
editable_dirs=$("$PY" - <<'PYEOF'
import glob, re, site
for f in glob.glob(site.getsitepackages()[0] + "/_editable_skbc_podlet.py"):
    print(":".join(sorted(set(re.findall(r"'([^']*/build/[^'/]+)'", open(f).read())))))
PYEOF
)
export SKBUILD_EDITABLE_SKIP="${editable_dirs}${SKBUILD_EDITABLE_SKIP:+:$SKBUILD_EDITABLE_SKIP}"
# Two threads even on a 1-core host: the threaded paths are what TSan is for.
export PODLET_NUM_THREADS="${PODLET_NUM_THREADS:-2}"
if [[ $kind == address ]]; then
  runtime="$(gcc -print-file-name=libasan.so)"
  # detect_leaks=0: CPython's interned objects and pools are leaks by LeakSanitizer's
  # definition. halt_on_error=0 with -fsanitize-recover: the plugin attributes each report.
  export ASAN_OPTIONS="log_path=$LOGS/asan:halt_on_error=0:detect_leaks=0:abort_on_error=0:allocator_may_return_null=1:suppressions=$ROOT/scripts/sanitize-address.supp"
  export UBSAN_OPTIONS="log_path=$LOGS/ubsan:print_stacktrace=1:halt_on_error=0:suppressions=$ROOT/scripts/sanitize-ubsan.supp"
else
  runtime="$(gcc -print-file-name=libtsan.so)"
  # NumPy's OpenBLAS (the tests' float64 references) keeps its own uninstrumented thread
  # pool, synchronised by spin-waits TSan cannot see: every np.matmul would be a report.
  export OPENBLAS_NUM_THREADS=1
  # JAX's CPU client (the oracle) runs computations and transfers on its own
  # uninstrumented worker threads and hands the buffers (tsl::port::AlignedMalloc) back
  # through synchronisation TSan cannot see; the reports' stacks are XLA's JIT code, which
  # no suppression can name (the libjax_common.so entry below did not catch them). So:
  # JAX's computations inline on the calling thread, without Eigen's intra-op pool, and
  # ignore_noninstrumented_modules=1 below: memcpy / free called from uninstrumented code
  # (XLA's, NumPy's) are not checked. podlet's own code is compiled with -fsanitize=thread
  # and stays fully checked; what is given up is a race between a podlet thread and such a
  # call (NumPy freeing an array a podlet thread still reads: a kernel call keeps its
  # arguments referenced and joins its threads before it returns).
  export JAX_CPU_ENABLE_ASYNC_DISPATCH=false
  export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
  # history_size=7: the longest access history, so a race with an uninstrumented JAX thread
  # still shows its libjax_common.so stack and meets the suppression instead of
  # "[failed to restore the stack]".
  # memory_limit_mb: TSan keeps the shadow of every address a worker ever touched, and a
  # worker running a quarter of the subset reached 17 GB and was OOM-killed on a 24 GiB
  # host (2 workers). Above the limit TSan flushes its shadow and histories: a race whose
  # first access came before a flush goes unseen, a race within the window does not.
  export TSAN_OPTIONS="log_path=$LOGS/tsan:halt_on_error=0:ignore_noninstrumented_modules=1:second_deadlock_stack=1:history_size=7:memory_limit_mb=${PODLET_TSAN_MEMORY_MB:-6144}:suppressions=$ROOT/scripts/sanitize-thread.supp"
fi
# libstdc++ with it: Python is C, so libstdc++ would load after the runtime, which then
# finds no real __cxa_throw to intercept (ASan CHECK-fails at the first C++ exception).
export LD_PRELOAD="$runtime $(g++ -print-file-name=libstdc++.so)"
# The subset: every test file except the ones that only drive Python-side code, notebooks
# or JAX/PyTorch oracles at length (they reach no C++ the rest does not). Documented in
# CONTRIBUTING.md.
default=(tests --ignore=tests/test_notebooks.py --ignore=tests/test_examples.py
         --ignore=tests/test_examples_transforms.py --ignore=tests/test_packaging.py)
# Options alone (`-n 2`, `-x`) go with the subset; naming a test path (or `tests`) chooses.
named_path=0
for a in "$@"; do [[ -e "${a%%::*}" ]] && named_path=1; done
if ((named_path)); then args=("$@"); else args=("${default[@]}" "$@"); fi
# setarch -R: TSan's shadow layout needs the address space without high-entropy ASLR.
launcher=()
[[ $kind == thread ]] && launcher=(setarch "$(uname -m)" -R)
set +e
"${launcher[@]}" "$PY" -m pytest -p sanitize_plugin -q -p no:cacheprovider "${args[@]}"
status=$?
set -e
echo "[sanitize] $kind: pytest exit $status; report files in $LOGS: $(ls "$LOGS" | wc -l)"
if [[ $status -eq 0 && -n "$(ls -A "$LOGS")" ]]; then status=1; fi
exit $status
