"""The best-of-n wall time the benchmarks share (bench/attention.py, copy_fusion.py,
sharded_jit.py): one untimed call (compilation, first touch), then the fastest of `reps`."""
import time

import podlet


def best(fn, args, reps):
    podlet.block_until_ready(fn(*args))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        podlet.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return min(ts)
