"""Fused attention (prims/attention.cc) against the unfused op-by-op graph, in one run.

    .venv/bin/python bench/attention.py [--reps 5]

Flax's dot_product_attention at ViT-Tiny's shape (batch 32, 197 tokens, 3 heads of 64)
and Swin-T's first-stage windows (32 images x 64 windows of 7x7 = 49 tokens, 3 heads of
32), f32 and bf16, jitted forward and forward + backward, with
``config.fused_attention`` True (the fused primitive) and False (the op-by-op graph).
Prints the best of --reps times and the speedup; "auto" (the default) fuses where the
speedup measured here is above 1 (_src/attention.py, AUTO_MAX_SCORES).
"""
import argparse

import ml_dtypes
import numpy as np

import podlet
import podlet.numpy as jnp
from podlet import nn

from _timing import best  # bench/_timing.py: the shared best-of-n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    before = podlet.config.fused_attention
    print(f"active ISA: {podlet.cpu_info()['active_isa']}, {podlet._core.num_threads()} threads")
    for label, (B, T, N, H) in (("ViT-Tiny 197 tokens", (32, 197, 3, 64)), ("Swin-T 7x7 windows", (2048, 49, 3, 32))):
        for dtype in (np.float32, ml_dtypes.bfloat16):
            rs = np.random.RandomState(0)
            q, k, v = (rs.normal(size=(B, T, N, H)).astype(dtype) for _ in range(3))
            res = {}
            for fused in (True, False):
                podlet.config.update("fused_attention", fused)

                def loss(q, k, v):
                    return (nn.dot_product_attention(q, k, v).astype(jnp.float32) ** 2).sum()
                res[fused, "fwd"] = best(podlet.jit(loss), (q, k, v), a.reps)
                res[fused, "fwd+bwd"] = best(podlet.jit(podlet.grad(loss, argnums=(0, 1, 2))), (q, k, v), a.reps)
            for what in ("fwd", "fwd+bwd"):
                print(f"{label:22s} {np.dtype(dtype).name:9s} {what:8s} fused {res[True, what] * 1e3:8.1f} ms  "
                      f"unfused {res[False, what] * 1e3:8.1f} ms  speedup {res[False, what] / res[True, what]:.2f}x")
    podlet.config.update("fused_attention", before)


if __name__ == "__main__":
    main()
