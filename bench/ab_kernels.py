"""Two builds of podlet's core in one process, timed call by call on bench/kernels.py's
cases: the ratio of a change on a host whose speed drifts (a shared host can halve for
minutes, so two processes run minutes apart disagree by more than most changes gain).

    # the baseline: a worktree of the commit before, configured with a pybind11 tag
    git worktree add /tmp/base <commit>
    cmake -S /tmp/base -B /tmp/base/build -G Ninja -DCMAKE_BUILD_TYPE=Release \\
        -DPODLET_PYBIND_TAG=base -Dpybind11_DIR=$(.venv/bin/python -c \\
        "import pybind11; print(pybind11.get_cmake_dir())") -DPython_EXECUTABLE=$PWD/.venv/bin/python
    PATH=$PWD/.venv/bin:$PATH ninja -C /tmp/base/build
    .venv/bin/python bench/ab_kernels.py /tmp/base/build --only dot --dtype bfloat16 --match attn

The working tree's build (the editable install) is "new". Each case runs `--reps` times in
each build, the two alternating, and the best of each is compared: new/base < 1 is faster.
Commits from before PODLET_PYBIND_TAG existed need the define by hand: a first line
`#define PYBIND11_COMPILER_TYPE "_base"` in each file of cpp/bindings/ of the worktree.
The two builds keep separate thread pools' state and buffer pools; outputs are compared
too (`--bits`: bit for bit, else the time only).
"""
import argparse
import importlib.machinery
import importlib.util
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

from podlet import _core as new  # noqa: E402  (the working tree's build)
from podlet._src import dtypes  # noqa: E402
import kernels  # noqa: E402


def load_core(build_dir):
    """The _core module of another build directory, beside the one already imported."""
    sos = [f for f in os.listdir(build_dir) if f.startswith("_core") and f.endswith(".so")]
    if not sos:
        raise SystemExit(f"ab_kernels: no _core*.so in {build_dir}")
    path = os.path.join(build_dir, sos[0])
    loader = importlib.machinery.ExtensionFileLoader("_core", path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_file_location("_core", path, loader=loader))
    try:
        loader.exec_module(mod)
    except ImportError as e:
        raise SystemExit(f"ab_kernels: {path} cannot load beside the working tree's build ({e}); configure it "
                         "with -DPODLET_PYBIND_TAG=base") from None
    return mod


def cases_of(core, which, dtype, batch):
    """bench/kernels.py's cases with arrays of `core` (each build takes only its own)."""
    kernels._core = core
    kernels.arr = lambda x: core.Array.from_numpy(np.ascontiguousarray(x))
    out = []
    if which in (None, "dot"):
        out += kernels.dot_cases(np.random.default_rng(0), dtype)
    if which in (None, "conv"):
        out += kernels.conv_cases(np.random.default_rng(0), batch, dtype)
    if which in (None, "attention"):
        out += kernels.attention_cases(np.random.default_rng(0), batch, dtype)
    return out


def raw(x):
    x = x[0] if isinstance(x, (list, tuple)) else x
    return np.array(x._numpy_view(), copy=True).view(np.uint8)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base", help="build directory of the baseline _core")
    p.add_argument("--only", choices=["dot", "conv", "attention"], default=None)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    p.add_argument("--isa", default=None, help="ISA for both builds (default: the host's best)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--match", default="", help="only cases whose name contains this")
    p.add_argument("--bits", action="store_true", help="also require bit-identical outputs")
    args = p.parse_args()
    base = load_core(args.base)
    dt = dtypes.bfloat16 if args.dtype == "bfloat16" else np.float32
    cores = {"base": base, "new": new}
    for c in cores.values():
        c.set_isa(args.isa or new.cpu_info()["best_isa"])
        if args.threads:
            c.set_num_threads(args.threads)
    cases = {k: cases_of(c, args.only, dt, args.batch) for k, c in cores.items()}
    print(f"isa {args.isa or new.cpu_info()['best_isa']}, best of {args.reps} alternating calls per build")
    print(f"{'case':46s}{'base ms':>10s}{'new ms':>10s}{'new/base':>10s}{'new GF/s':>10s}")
    for i, (name, _, flops) in enumerate(cases["new"]):
        if args.match not in name:
            continue
        best = {"base": float("inf"), "new": float("inf")}
        outs = {}
        for _ in range(args.reps):
            for k, core in cores.items():
                prim, ins, attrs = cases[k][i][1]
                t0 = time.perf_counter()
                r = core.apply(prim, ins, attrs)
                best[k] = min(best[k], time.perf_counter() - t0)
                outs[k] = r
        same = ""
        if args.bits:
            same = "  same bits" if np.array_equal(raw(outs["base"]), raw(outs["new"])) else "  BITS DIFFER"
        print(f"{name:46s}{best['base'] * 1e3:10.2f}{best['new'] * 1e3:10.2f}{best['new'] / best['base']:10.2f}"
              f"{flops / best['new'] / 1e9:10.1f}{same}", flush=True)


if __name__ == "__main__":
    main()
