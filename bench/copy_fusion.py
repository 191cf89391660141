"""Data movement in the transformers' attention blocks, with the passes that remove it on
and off, in one run (ir/copy_fusion.h, ir/attention_views.h, ir/dot_layout.h).

    .venv/bin/python bench/copy_fusion.py [--reps 5] [--rounds 2] [--only heads,dbias]

Jitted forward + backward functions, three at Swin-T's first stage (batch 32, a 56x56x96
bf16 map, 7x7 windows, 3 heads of 32) and one at ViT-Tiny's attention:
  shift     the cyclic shift over two axes (jnp.roll), the window partition, a Dense
            layer, the inverse partition and the shift back (the data movement of a
            shifted block around its projections): PODLET_COPY_FUSION=1 vs 0;
  qkv       the qkv Dense layer, its [B, 49, 3, 3, 32] split, the fused attention and the
            gradient's concatenation: PODLET_ATTENTION_VIEWS=1 vs 0;
  dbias     the fused attention with the relative-position bias [1, 3, 49, 49] shared by
            the 2048 windows and a shift mask, the bias gradient summed over the windows
            in the kernel or per window and then reduced: PODLET_ATTENTION_DBIAS=1 vs 0;
  heads     Flax's attention without the fused kernel at ViT-Tiny's size (batch 32, 197
            tokens, 3 heads of 64: einsums and a softmax), whose [b, h, q, d] products
            are transposed to [b, q, h, d] and back in its gradient unless the products
            write and read those layouts: PODLET_DOT_TRANSPOSES=1 vs 0.
Each side's best of --reps, over --rounds alternations (a fresh jit each time: the
environment switch is read when the executable graph is built). Prints the times and the
ratio off / on; writes bench/results/copy_fusion.json (or --out).
"""
import argparse
import json
import os
import pathlib

import numpy as np

import podlet
import podlet.numpy as jnp

from _host import host  # bench/_host.py: the CPU the figures come from
from _timing import best  # bench/_timing.py: the shared best-of-n


def shift_case():
    b, h, w, c, ws, s = 32, 56, 56, 96, 7, 3
    rs = np.random.RandomState(0)
    x = jnp.asarray(rs.normal(size=(b, h, w, c)).astype(np.float32)).astype(jnp.bfloat16)
    wt = jnp.asarray((rs.normal(size=(c, c)) / np.sqrt(c)).astype(np.float32)).astype(jnp.bfloat16)

    def loss(x, wt):
        y = jnp.roll(x, (-s, -s), axis=(1, 2))
        y = jnp.reshape(jnp.transpose(jnp.reshape(y, (b, h // ws, ws, w // ws, ws, c)), (0, 1, 3, 2, 4, 5)),
                        (-1, ws * ws, c))
        y = y @ wt
        y = jnp.reshape(jnp.transpose(jnp.reshape(y, (b, h // ws, w // ws, ws, ws, c)), (0, 1, 3, 2, 4, 5)),
                        (b, h, w, c))
        y = jnp.roll(y, (s, s), axis=(1, 2))
        return (y.astype(jnp.float32) ** 2).sum()
    return loss, (x, wt), "PODLET_COPY_FUSION"


def qkv_case():
    bw, n, heads, hd = 2048, 49, 3, 32
    c = heads * hd
    rs = np.random.RandomState(1)
    x = jnp.asarray(rs.normal(size=(bw, n, c)).astype(np.float32)).astype(jnp.bfloat16)
    wt = jnp.asarray((rs.normal(size=(c, 3 * c)) / np.sqrt(c)).astype(np.float32)).astype(jnp.bfloat16)

    def loss(x, wt):
        qkv = jnp.reshape(x @ wt, (bw, n, 3, heads, hd))
        o = podlet.nn.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], scale=hd ** -0.5)
        return (o.astype(jnp.float32) ** 2).sum()
    return loss, (x, wt), "PODLET_ATTENTION_VIEWS"


def dbias_case():
    bw, n, heads, hd = 2048, 49, 3, 32
    rs = np.random.RandomState(2)
    q, k, v = (jnp.asarray(rs.normal(size=(bw, n, heads, hd)).astype(np.float32)).astype(jnp.bfloat16)
               for _ in range(3))
    bias = jnp.asarray(rs.normal(size=(1, heads, n, n)).astype(np.float32))
    mask = jnp.asarray(rs.rand(bw, 1, n, n) > 0.1)

    def loss(q, bias):
        o = podlet.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=hd ** -0.5)
        return (o.astype(jnp.float32) ** 2).sum()
    return loss, (q, bias), "PODLET_ATTENTION_DBIAS"


def heads_case():
    b, n, heads, hd = 32, 197, 3, 64
    rs = np.random.RandomState(3)
    q, v = (jnp.asarray(rs.normal(size=(b, n, heads, hd)).astype(np.float32)).astype(jnp.bfloat16) for _ in range(2))

    def loss(q, v):
        w = podlet.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, q * 0.125).astype(jnp.float32), axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", w.astype(jnp.bfloat16), v)
        return (o.astype(jnp.float32) ** 2).sum()
    return loss, (q, v), "PODLET_DOT_TRANSPOSES"


CASES = {"shift": shift_case, "qkv": qkv_case, "dbias": dbias_case, "heads": heads_case}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "copy_fusion.json"))
    ap.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    a = ap.parse_args()
    unknown = [c for c in a.only.split(",") if c not in CASES]
    if unknown:
        ap.error(f"--only: unknown case(s) {', '.join(unknown)}; expected some of {', '.join(CASES)}")
    info = podlet.cpu_info()
    print(f"active ISA: {info['active_isa']}, {podlet._core.num_threads()} threads")
    rows = []
    for name in a.only.split(","):
        loss, args, switch = CASES[name]()
        t = {"1": [], "0": []}
        for _ in range(a.rounds):
            for on in ("1", "0"):
                os.environ[switch] = on
                t[on].append(best(podlet.jit(podlet.value_and_grad(loss, argnums=(0, 1))), args, a.reps))
        os.environ.pop(switch)
        on, off = min(t["1"]), min(t["0"])
        rows.append({"case": name, "switch": switch, "on_ms": on * 1e3, "off_ms": off * 1e3, "speedup": off / on})
        print(f"{name:6s} {switch:24s} on {on * 1e3:7.1f} ms  off {off * 1e3:7.1f} ms  speedup {off / on:.2f}x")
    pathlib.Path(a.out).write_text(json.dumps({"host": host(), "isa": info["active_isa"], "threads": podlet._core.num_threads(),
                                               "reps": a.reps, "rounds": a.rounds, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
