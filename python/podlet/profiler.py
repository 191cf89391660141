"""podlet.profile: where a step's time goes, per primitive.

    import podlet
    stats = podlet.profile(train_step, state, batch)    # prints a table, returns a dict

``profile(fn, *args, **kwargs)`` calls ``fn`` once to trace and warm up (jit caches the
graph), then once more with the executor's counters on, and prints one row per
(primitive, dtype): calls, time, GFLOP/s, % of the machine's measured peak for that
dtype, bytes moved (inputs + outputs of each node) and GB/s; then the step's wall
time, its peak memory (every buffer podlet holds, parameters included) and the
model-FLOP utilisation, MFU = FLOPs / (wall time x peak on the threads in use).
Nodes of pmap'd functions are rows ``prim [how]``: ``once`` (a replicated value, computed
a single time), ``merged`` (one kernel call over every replica's buffer),
``per-replica`` (one call per replica) or ``collective``.
``profiler.run`` takes the same with options (steps, warmup, quiet, by_shape);
``by_shape=True`` gives each (primitive, input dtypes and shapes) its own row, e.g. one
per convolution layer shape: ``conv_bwd_filter bfloat16[32,56,56,64] bfloat16[...]``.

``PODLET_PROFILE=1`` in the environment turns the counters on at import and prints the
table of everything the process ran (jit'd and eager) when it exits;
``PODLET_PROFILE=shapes`` does the same with rows by shape.

Peaks are measured once per process (``measured_peak``), not looked up: an f32 FMA loop
(the widest FMA the active ISA has) and a bf16 dot loop (vdpbf16ps, on AVX512_BF16
hosts) in C++ on 1 thread and on the threads in use. The all-threads figure is
max(measured, threads x the 1-thread figure): on a shared machine the multi-thread loop
is the most disturbed, and the cores are alike. Without a bf16 dot instruction, or where
it is set aside (``_core.set_bf16_dot``: Intel without AMX in use), bf16 GEMMs and
convolutions widen to f32 and FMA, so the bf16 peak is the f32 peak there; f64 is half
the f32 peak (half the lanes per FMA).
"""
import atexit
import os
import sys
import time

from . import _core

__all__ = ["profile", "run", "measured_peak", "format_table"]

_peaks = {}


def measured_peak(threads=None):
    """{'float32': GFLOP/s, 'bfloat16': ..., 'float64': ...} on `threads` threads
    (default: the configured thread count), measured once and cached."""
    threads = threads or _core.num_threads()

    def measure(kind, loop):
        if (kind, threads) not in _peaks:
            if (kind, 1) not in _peaks:
                _peaks[(kind, 1)] = loop(1)
            one = _peaks[(kind, 1)]
            _peaks[(kind, threads)] = one if threads == 1 else max(loop(threads), threads * one)
        return _peaks[(kind, threads)]

    f32 = measure("f32", _core.measure_peak)
    # Without a bf16 dot instruction bf16 products run on the f32 FMA path: its peak is
    # the f32 one (one measurement, not a second noisy run of the same loop).
    # So do they where the bf16 dot is set aside for the FMAs (Intel without AMX in use:
    # _core.set_bf16_dot).
    bf16 = measure("bf16", _core.measure_bf16_peak) if _core.have_bf16_dot() and _core.bf16_dot() else f32
    # On AMX hosts bf16 matmuls and convolutions run on the tiles: their peak is the
    # denominator of bf16 %peak and MFU.
    if _core.active_isa() == "amx":
        bf16 = measure("amx", _core.measure_amx_peak)
    return {"float32": f32, "bfloat16": bf16, "float64": f32 / 2, "threads": threads}


def _take_detail():
    """run_graph's counters and the pmap executor's (``prim [how]``), since the last take."""
    detail = dict(_core.take_profile_detailed())
    for (prim, dtype, how), e in _core.take_pmap_profile().items():
        detail[(f"{prim} [{how}]", dtype)] = e
    return detail


def _rows(detail, peaks):
    rows = []
    for (prim, dtype), (calls, secs, flops, nbytes) in detail.items():
        gf = flops / secs / 1e9 if secs > 0 else 0.0
        pk = peaks.get(dtype) if flops else None
        rows.append({"prim": prim, "dtype": dtype, "calls": int(calls), "seconds": secs, "flops": flops,
                     "gflops_per_s": gf, "pct_peak": 100.0 * gf / pk if pk else None, "bytes": nbytes,
                     "gb_per_s": nbytes / secs / 1e9 if secs > 0 else 0.0})
    rows.sort(key=lambda r: -r["seconds"])
    return rows


def _fmt_bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def format_table(stats):
    """The printed form of a profile dict."""
    lines = []
    op_total = sum(r["seconds"] for r in stats["ops"]) or 1e-30
    w = max([26] + [len(r["prim"]) for r in stats["ops"]])  # rows by shape are long
    lines.append(f"{'primitive':{w}s} {'dtype':9s} {'calls':>6s} {'ms':>9s} {'%time':>6s} {'GFLOP/s':>8s} "
                 f"{'%peak':>6s} {'moved':>10s} {'GB/s':>6s}")
    for r in stats["ops"]:
        pct = f"{r['pct_peak']:5.1f}%" if r["pct_peak"] is not None else "     -"
        lines.append(f"{r['prim']:{w}s} {r['dtype']:9s} {r['calls']:6d} {r['seconds'] * 1e3:9.2f} "
                     f"{100 * r['seconds'] / op_total:5.1f}% {r['gflops_per_s']:8.1f} {pct:>6s} "
                     f"{_fmt_bytes(r['bytes']):>10s} {r['gb_per_s']:6.1f}")
    pk = stats["peak_gflops"]
    steps = stats.get("steps", 1)
    wall = stats.get("wall_seconds")
    lines.append(f"ops total: {op_total * 1e3:.2f} ms for {steps} step(s), {stats['flops'] / 1e9:.2f} GFLOP"
                 + (f"; wall {wall * 1e3:.2f} ms" if wall else ""))
    peak_s = f"{pk['float32']:.1f}" if pk.get("float32") else "n/a"
    bf = pk.get("bfloat16")
    bf_s = f"{bf:.1f}" if bf else "n/a"
    isa = _core.cpu_info()["active_isa"]
    bf_note = (" (AMX tiles, TDPBF16PS)" if isa == "amx" else
               " (vdpbf16ps)" if isa == "avx512bf16" and _core.bf16_dot() else
               " (no bf16 dot in use: bf16 runs on the f32 FMAs)")
    lines.append(f"measured peak on {pk['threads']} thread(s): f32 {peak_s} GFLOP/s, bf16 {bf_s}{bf_note}")
    if stats.get("peak_memory_bytes") is not None:
        lines.append(f"peak memory: {_fmt_bytes(stats['peak_memory_bytes'])} "
                     f"(live before the step {_fmt_bytes(stats['live_before_bytes'])})")
    if stats.get("mfu") is not None:
        lines.append(f"MFU: {100 * stats['mfu']:.1f}% of the {stats['mfu_dtype']} peak")
    return "\n".join(lines)


def _mfu(flops, seconds, peaks, ops):
    # The peak of the dtype that carries most FLOPs (bf16 for a bf16 model).
    by = {}
    for r in ops:
        by[r["dtype"]] = by.get(r["dtype"], 0.0) + r["flops"]
    d = max(by, key=by.get) if by else "float32"
    pk = peaks.get(d) or peaks["float32"]
    if not pk or seconds <= 0:
        return None, d
    return flops / seconds / 1e9 / pk, d


def run(fn, args=(), kwargs=None, *, steps=1, warmup=1, quiet=False, file=None, by_shape=False):
    """Profiles `steps` calls of fn(*args, **kwargs) after `warmup` unprofiled calls;
    returns the stats dict (and prints its table unless quiet). by_shape: one row per
    primitive and input shapes instead of per primitive."""
    kwargs = kwargs or {}
    for _ in range(warmup):
        _block(fn(*args, **kwargs))
    peaks = measured_peak()
    was_on, was_by_shape = _core.profiling(), _core.profiling_by_shape()
    _core.set_profiling(False)
    _take_detail()  # drop whatever was counted before
    live_before = _core.memory_stats()[0]
    _core.reset_peak_memory()
    _core.set_profiling(True, by_shape=bool(by_shape))
    t0 = time.perf_counter()
    out = None
    try:
        for _ in range(steps):
            # The last step's outputs go first, as in a training loop that replaces its
            # state: held across the call, they made the step allocate a third set of
            # state buffers, and fresh pages inflated the time of the ops writing them
            # (ResNet-34's AdamW read 42 instead of 14 ms a step) and the peak memory.
            out = None
            out = _block(fn(*args, **kwargs))
    finally:
        wall = time.perf_counter() - t0
        _core.set_profiling(was_on, by_shape=was_by_shape)
    detail = _take_detail()
    peak_mem = _core.memory_stats()[1]
    ops = _rows(detail, peaks)
    flops = sum(r["flops"] for r in ops)
    mfu, mfu_dtype = _mfu(flops, wall, peaks, ops)
    stats = {"ops": ops, "steps": steps, "wall_seconds": wall, "op_seconds": sum(r["seconds"] for r in ops),
             "flops": flops, "peak_gflops": peaks, "peak_memory_bytes": peak_mem,
             "live_before_bytes": live_before, "mfu": mfu, "mfu_dtype": mfu_dtype, "output": out}
    if not quiet:
        print(format_table(stats), file=file or sys.stdout, flush=True)
    return stats


def profile(fn, *args, **kwargs):
    """Runs fn(*args, **kwargs) once to trace/warm up, then once profiled; prints the
    per-op table and returns the stats dict (see the module docstring)."""
    return run(fn, args, kwargs)


def _block(x):
    # Execution is synchronous; touching the leaves is enough (and cheap).
    return x


def _report_at_exit():
    detail = _take_detail()
    if not detail:
        return
    peaks = measured_peak()
    ops = _rows(detail, peaks)
    flops = sum(r["flops"] for r in ops)
    secs = sum(r["seconds"] for r in ops)
    mfu, d = _mfu(flops, secs, peaks, ops)
    stats = {"ops": ops, "flops": flops, "peak_gflops": peaks, "peak_memory_bytes": _core.memory_stats()[1],
             "live_before_bytes": 0, "mfu": mfu, "mfu_dtype": d}
    print("podlet profile (PODLET_PROFILE=1: every graph and eager op this process ran; "
          "MFU over op time, not wall time)", file=sys.stderr)
    print(format_table(stats), file=sys.stderr, flush=True)


_env = os.environ.get("PODLET_PROFILE", "").lower()
if _env in ("1", "true", "yes", "shapes"):
    _core.set_profiling(True, by_shape=_env == "shapes")
    atexit.register(_report_at_exit)
