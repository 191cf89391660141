"""Differential fuzzing of fused elementwise programs.

A seeded generator writes random elementwise programs -- DAGs over every primitive the
fusion pass (cpp/podlet/ir/fusion.cc) fuses, in every dtype it accepts, with NumPy and
broadcast_in_dim operands, reshapes inside chains, column sums (reduce_sum over leading
axes, which a fused node computes itself) and non-fusible primitives between groups
(integer arithmetic, shifts, rem, atan2, sin, round, erf_inv, reductions over trailing
axes) -- on sizes with tails (tiny, not multiples of 8 or 16, around the interpreter's
1024-element tiles and 16384-element chunks, the 4-chunk split of short long programs,
a few past the 4 MB non-temporal store threshold), with inputs drawn from nasty values
(NaNs with payloads, quiet and signalling, both signs; infinities; signed zeros;
subnormals; the largest finite values; values that round to infinity in bf16; the
branch points of exp / tanh / logistic; integer extremes; raw random bit patterns).

Each program is one `podlet.jit` function, run under every configuration this host
has, and the outputs are compared bit for bit against the unfused graph:

    unfused          PODLET_FUSION off: the traced graph, one kernel per primitive (the reference)
    eager            no jit: each primitive applied as the Python code calls it
    fused/<isa>      fused graph, the interpreter (prims/fused.cc) at each ISA the host has:
                     ref (the baseline build), avx2, avx512 (fused_avx2.cc, fused_avx512.cc)
    fused/jit-1way   fused graph with AVX-512 machine code (prims/fused_jit.cc), AVX-512 hosts
                     only, one 16-element vector per iteration
    fused/jit        the same, up to eight vectors per iteration (the default)
    fused/jit-avx512bf16  the same with the bf16 roundings on vcvtneps2bf16 / vcvtne2ps2bf16,
                     AVX512_BF16 hosts only
    .../1thread      the best fused configuration again on one thread (bits may not depend on it)

Every switch is flipped at run time in this one process: PODLET_FUSION is read from the
environment at each call (python/podlet/_src/fusion.py, cpp/podlet/ir/subgraph.cc),
the ISA by _core.set_isa, the JIT by _core.set_fused_jit, threads by podlet.config. So
no worker subprocesses are needed.

NaNs are compared by their bits, payloads included: that is podlet's contract, not a
lenient choice. elementwise.cc and fused_ops.h share one NaN rule (add and mul return
the first operand's NaN quieted, max / min the first NaN, other ops whatever the IEEE
instruction returns) and both canonicalise a NaN rounded to bf16 to 0x7fc0 / 0xffc0 with
its sign (kernels/fastmath.h f32_to_bf16_bits), so nothing needs canonicalising here.

    .venv/bin/python fuzz/fused_diff.py --seconds 600 --seed 1
    .venv/bin/python fuzz/fused_diff.py --programs 500 --seed 7
    .venv/bin/python fuzz/fused_diff.py --seconds 300 --excess   # allow_excess_precision's fused configs
    .venv/bin/python fuzz/fused_diff.py --show 1000042     # print one program
    .venv/bin/python fuzz/fused_diff.py --replay 1000042   # run (and shrink) one program

Program i of a run with --seed S has the program seed S * 1000000 + i. A mismatch prints
a shrunk reproducer (the program seed, the program as Python, the first differing
element with its inputs) and the script exits 1.
"""
import argparse
import contextlib
import faulthandler
import os
import re
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import podlet
from podlet import _core
from podlet._src import dtypes as _dtypes
from podlet._src import fusion as _fusion
from podlet._src.core import bind

BF16 = _dtypes.bfloat16
NP_DTYPE = {"float32": np.dtype(np.float32), "bfloat16": BF16, "float64": np.dtype(np.float64),
            "int32": np.dtype(np.int32), "uint32": np.dtype(np.uint32), "uint8": np.dtype(np.uint8),
            "bool": np.dtype(np.bool_)}
DTYPES = list(NP_DTYPE)
FLOATS = ["float32", "bfloat16", "float64"]
INTS = ["int32", "uint32", "uint8"]
BITS = {"float32": np.uint32, "bfloat16": np.uint16, "float64": np.uint64, "int32": np.uint32,
        "uint32": np.uint32, "uint8": np.uint8, "bool": np.uint8}

# ---- the primitives ------------------------------------------------------------------
# What fusion.cc fuses (fused_op): float unary / binary ops on f32, bf16, f64; is_finite;
# not / and / or / xor on bool; comparisons and select on any dtype; clamp on floats;
# convert_element_type between any two dtypes; reshape inside a group; broadcast_in_dim
# operands absorbed as strided loads; column reduce_sums of f32 / bf16 group values.
FUSED_UNARY = ["neg", "abs", "sign", "exp", "log", "log1p", "expm1", "tanh", "logistic", "sqrt", "rsqrt",
               "erf", "floor", "ceil"]
FUSED_BINARY = ["add", "sub", "mul", "div", "max", "min", "pow"]
LOGICAL = ["and", "or", "xor"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
# Elementwise primitives that do not fuse (they seal the groups around them).
INT_UNARY = ["neg", "abs", "sign", "not"]
INT_BINARY = ["add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor", "shift_left",
              "shift_right_logical", "shift_right_arithmetic"]
FLOAT_OTHER_UNARY = ["round", "sin", "cos", "erf_inv"]
FLOAT_OTHER_BINARY = ["rem", "atan2"]

# fused instruction opcodes (fusion.h enum Op) and DType numbers (dtype.h), to read the
# `code` attribute of fused_elementwise nodes for the coverage report
OPCODES = ["load", "neg", "abs", "sign", "exp", "log", "log1p", "expm1", "tanh", "logistic", "sqrt", "rsqrt",
           "erf", "floor", "ceil", "integer_pow", "is_finite", "not", "convert", "add", "sub", "mul", "div",
           "max", "min", "pow", "and", "or", "xor", "eq", "ne", "lt", "le", "gt", "ge", "select", "clamp"]
DTYPE_CODES = ["float32", "bfloat16", "float64", "int32", "uint32", "uint8", "bool"]

# ---- nasty values --------------------------------------------------------------------
F32_SPECIAL_BITS = [0x7fc00000, 0xffc00000, 0x7fc01234, 0xffc00abc, 0x7f800001, 0xff812345, 0x7fffffff,
                    0x7f800000, 0xff800000, 0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff,
                    0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x3f800000, 0xbf800000]
F32_SPECIAL_VALUES = [1e-40, -1e-40, 3.39e38, -3.397e38, 0.5, -0.5, 1.5, 2.5, -2.5, 88.72, 89.5, -103.9,
                      -104.5, 0.625, -0.6249, 44.5, -87.5, -100.0, 2147483520.0, 2147483648.0, -2147483904.0,
                      4294967040.0, 4294967296.0, 255.5, 256.0, -1.0, -0.9999999, 1e-8, 16777217.0, 3.9,
                      4.0, 9.0, 1e30, -1e30, 0.9999999, 1.0000001]
BF16_SPECIAL_BITS = [0x7fc0, 0xffc0, 0x7fc1, 0xffc5, 0x7f81, 0xff90, 0x7fff, 0x7f80, 0xff80, 0x0000, 0x8000,
                     0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f00, 0x42b1, 0xc2d0]
F64_SPECIAL_BITS = [0x7ff8000000000000, 0xfff8000000000000, 0x7ff8000000001234, 0xfff0000000000001,
                    0x7ff0000000000001, 0x7ff0000000000000, 0xfff0000000000000, 0x0, 0x8000000000000000,
                    0x0000000000000001, 0x800fffffffffffff, 0x7fefffffffffffff, 0x3ff0000000000000]
F64_SPECIAL_VALUES = [1e-310, -1e-310, 3.5e38, -3.5e38, 1e-46, 1.401298464324817e-45, 3.4028235677973366e38,
                      1.0000000596046448, 709.7, -745.2, 0.5, -0.5, 2.5, 2147483647.5, -2147483648.5, 1e300]
INT_SPECIAL = {"int32": [-2**31, 2**31 - 1, -1, 0, 1, 2, 31, 32, 33, -32, 255, 256],
               "uint32": [0, 1, 2, 2**32 - 1, 2**31, 2**31 - 1, 31, 32, 33, 255, 256],
               "uint8": [0, 1, 2, 7, 8, 127, 128, 254, 255]}
# Python literals used as weakly typed scalar operands (0-d constants in the graph)
FLOAT_LITERALS = ["0.0", "-0.0", "1.0", "-1.0", "0.5", "2.0", "1.5", "-3.0", "1e-40", "3.4e38",
                  "float('inf')", "float('-inf')", "float('nan')", "88.72", "-104.5"]
INT_LITERALS = {"int32": ["0", "1", "-1", "2", "3", "31", "32", "2147483647", "-2147483648"],
                "uint32": ["0", "1", "2", "31", "32", "4294967295", "2147483648"],
                "uint8": ["0", "1", "7", "8", "128", "255"]}


def _special_pool(dtype):
    """Special values of dtype as an array of that dtype."""
    if dtype == "float32":
        return np.concatenate([np.array(F32_SPECIAL_BITS, np.uint32).view(np.float32),
                               np.array(F32_SPECIAL_VALUES, np.float32)])
    if dtype == "bfloat16":
        with np.errstate(over="ignore"):
            vals = np.array(F32_SPECIAL_VALUES, np.float32).astype(BF16)
        return np.concatenate([np.array(BF16_SPECIAL_BITS, np.uint16).view(BF16), vals])
    if dtype == "float64":
        return np.concatenate([np.array(F64_SPECIAL_BITS, np.uint64).view(np.float64),
                               np.array(F64_SPECIAL_VALUES, np.float64),
                               np.array(F32_SPECIAL_VALUES, np.float64)])
    if dtype == "bool":
        return np.array([False, True])
    return np.array(INT_SPECIAL[dtype], np.int64).astype(NP_DTYPE[dtype])


def make_values(rng, dtype, shape):
    """A random array of dtype and shape from one of a few profiles of nasty values."""
    n = int(np.prod(shape, dtype=np.int64))
    nd = NP_DTYPE[dtype]
    pool = _special_pool(dtype)
    profile = rng.choice(["normal", "special", "bits", "integral", "uniform"], p=[0.4, 0.25, 0.15, 0.1, 0.1])
    if dtype == "bool":
        p = rng.choice([0.5, 0.0, 1.0, 0.1, 0.9])
        out = rng.random(n) < p
    elif profile == "uniform":
        out = np.full(n, pool[rng.integers(len(pool))] if rng.random() < 0.6 else
                      make_values(rng, dtype, (1,))[0], nd)
    elif profile == "bits":
        out = rng.integers(0, np.iinfo(BITS[dtype]).max, n, dtype=BITS[dtype], endpoint=True).view(nd)
    elif dtype in INTS:
        info = np.iinfo(nd)
        if profile == "normal":
            out = rng.integers(info.min, info.max, n, endpoint=True, dtype=np.int64).astype(nd)
        else:  # small values (shift amounts, division by 0 / -1)
            out = rng.integers(max(info.min, -40), min(info.max, 40), n, endpoint=True).astype(nd)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            if profile == "integral":
                v = np.round(rng.standard_normal(n) * 10) / rng.choice([1, 2, 4])
            else:
                v = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 3.0, 100.0, 1e30, 1e-38])
            out = v.astype(nd)
    if dtype != "bool" and profile in ("normal", "special", "integral") and n:
        frac = 0.5 if profile == "special" else 0.08
        k = int(rng.binomial(n, frac))
        if k:
            idx = rng.choice(n, size=k, replace=False) if k < n else np.arange(n)
            out[idx] = pool[rng.integers(len(pool), size=k)]
    return out.reshape(shape).copy()   # (np.ascontiguousarray would make a 0-d array 1-d)


# ---- programs ------------------------------------------------------------------------
@dataclass
class Val:
    name: str
    dtype: str
    shape: tuple


@dataclass
class Input(Val):
    kind: str = "arg"      # "arg": a jit argument; "const": a NumPy array the function closes over
    array: np.ndarray = None
    vseed: int = 0         # the seed its values are drawn from (Generator.build)


@dataclass
class Node(Val):
    prim: str = ""
    args: list = field(default_factory=list)   # value names or Python literals (strings)
    attrs: dict = field(default_factory=dict)


@dataclass
class Program:
    seed: int
    inputs: list
    nodes: list
    outputs: list   # value names

    def source(self):
        """The program as Python: `bind(prim, operands, attrs)` is one primitive."""
        args = [i.name for i in self.inputs if i.kind == "arg"]
        lines = [f"def program({', '.join(args)}):"]
        k = 0
        for i in self.inputs:
            if i.kind == "arg":
                lines.append(f"    # {i.name}: {i.dtype}{list(i.shape)}")
        for i in self.inputs:
            if i.kind == "const":
                lines.append(f"    {i.name} = K[{k}]  # constant {i.dtype}{list(i.shape)}"
                             + (" (all elements equal)" if _uniform(i.array) else ""))
                k += 1
        for n in self.nodes:
            ops = ", ".join([repr(n.prim)] + list(n.args) + [f"{a}={v!r}" for a, v in n.attrs.items()])
            lines.append(f"    {n.name} = bind({ops})  # {n.dtype}{list(n.shape)}")
        lines.append(f"    return ({', '.join(self.outputs)},)")
        return "\n".join(lines)

    def function(self):
        ns = {"bind": bind, "K": [i.array for i in self.inputs if i.kind == "const"]}
        exec(compile(self.source(), f"<fused_diff program {self.seed}>", "exec"), ns)
        return ns["program"]

    def args(self):
        return [i.array for i in self.inputs if i.kind == "arg"]

    def numel(self):
        return max([int(np.prod(v.shape, dtype=np.int64)) for v in self.inputs + self.nodes] or [0])

    def describe(self):
        """Shapes and value profiles, one line."""
        return f"seed {self.seed}: {len(self.nodes)} primitives, {len(self.inputs)} inputs, largest value " \
               f"{self.numel()} elements"


def _uniform(a):
    b = a.reshape(-1).view(BITS[_dtype_name(a)])
    return b.size > 1 and bool((b == b[0]).all())


def _dominates(big, small):
    """Whether `small` broadcasts to exactly `big` (NumPy rules)."""
    try:
        return tuple(np.broadcast_shapes(tuple(big), tuple(small))) == tuple(big)
    except ValueError:
        return False


def _divisors(n):
    return [d for d in range(1, min(n, 4096) + 1) if n % d == 0]


def _factor(rng, n, rank):
    """A random shape of `rank` dims with n elements (size-1 dims allowed)."""
    if rank == 0:
        return ()
    dims = []
    rest = n
    for _ in range(rank - 1):
        divs = _divisors(rest)
        d = int(rng.choice(divs[: max(1, len(divs) // 2 + 1)])) if rng.random() < 0.8 else int(rng.choice(divs))
        dims.append(d)
        rest //= d
    dims.append(rest)
    rng.shuffle(dims)
    return tuple(dims)


TILE, CHUNK = 1024, 16 * 1024   # prims/fused.cc kTile, kChunk


def _numel(rng):
    """An iteration-space size: tiny, tails, around tiles and chunks, a few large."""
    c = rng.random()
    if c < 0.25:
        return int(rng.integers(1, 65))
    if c < 0.45:
        return int(rng.integers(65, 1100))
    if c < 0.70:
        base = int(rng.choice([8, 16, 32, 64, 128, 256, TILE, 2 * TILE, 3 * TILE, CHUNK, 2 * CHUNK, 3 * CHUNK,
                               4 * CHUNK]))
        return max(1, base + int(rng.choice([-17, -16, -15, -9, -8, -7, -1, 0, 0, 1, 7, 8, 9, 15, 16, 17])))
    if c < 0.92:
        return int(rng.integers(1100, 70000))
    if c < 0.985:
        return int(rng.integers(70000, 300000))
    # non-temporal stores: outputs of at least 4 MB (fused.cc kStreamMin)
    return int(rng.choice([1 << 20, (1 << 20) + 3, 1_100_017, 2_097_152 + 1]))


def _full_shape(rng):
    n = _numel(rng)
    if rng.random() < 0.4:   # a last dim that is a power of two >= 16: the JIT's leaf sums
        k = int(rng.choice([16, 32, 64, 128, 256]))
        if n >= 2 * k:
            n = (n // k) * k
            lead = _factor(rng, n // k, int(rng.integers(1, 4)))
            return lead + (k,)
    rank = int(rng.choice([0, 1, 2, 3, 4], p=[0.03, 0.22, 0.35, 0.25, 0.15])) if n > 1 else int(rng.integers(0, 3))
    if rank == 0 and n != 1:
        rank = 1
    return _factor(rng, n, rank)


def _sub_shape(rng, shape):
    """A shape that broadcasts to `shape`: a scalar, a suffix, size-1 axes."""
    r = len(shape)
    c = rng.random()
    if r == 0 or c < 0.12:
        return ()
    lead = int(rng.integers(0, r)) if c < 0.55 else 0
    out = list(shape[lead:])
    for d in range(len(out)):
        if rng.random() < 0.35:
            out[d] = 1
    return tuple(out)


class Generator:
    """Builds one random Program from a seed."""

    def __init__(self, seed):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.inputs, self.nodes, self.vals = [], [], []
        self.counter = 0
        # "long": many fusible steps on 12K-64K elements, so that a program with few
        # elements and many instructions is cut into 4 chunks (prims/fused.cc); "fused":
        # fusible primitives only (big groups); "mixed": everything
        self.mode = str(self.rng.choice(["mixed", "fused", "long"], p=[0.6, 0.28, 0.12]))
        if self.mode == "long":
            n = int(self.rng.integers(12000, 4 * CHUNK))
            self.full = _factor(self.rng, n, int(self.rng.integers(1, 4)))
        else:
            self.full = _full_shape(self.rng)
        self.families = [self.full]   # shapes with the full element count (reshapes add some)

    # -- values --
    def _name(self, p):
        self.counter += 1
        return f"{p}{self.counter}"

    def new_input(self, dtype, shape):
        kind = "const" if self.rng.random() < 0.2 else "arg"
        v = Input(self._name("c" if kind == "const" else "x"), dtype, tuple(shape), kind)
        v.vseed = int(self.rng.integers(1 << 62))   # values drawn in build(), for the inputs kept
        self.inputs.append(v)
        self.vals.append(v)
        return v.name

    def node(self, prim, args, dtype, out_shape, **attrs):
        n = Node(self._name("v"), dtype, tuple(out_shape), prim, [str(a) for a in args], attrs)
        self.nodes.append(n)
        self.vals.append(n)
        return n.name

    def val(self, name):
        return next(v for v in self.vals if v.name == name)

    def shape_of(self, name):
        return self.val(name).shape if not _is_literal(name) else ()

    def pick_dtype(self, allowed, recent=True):
        if recent and self.vals and self.rng.random() < 0.6:
            for v in reversed(self.vals[-4:]):
                if v.dtype in allowed:
                    return v.dtype
        w = {"float32": 4, "bfloat16": 3, "float64": 1.5, "int32": 1.5, "uint32": 1, "uint8": 1, "bool": 1.5}
        p = np.array([w[d] for d in allowed], float)
        return str(self.rng.choice(allowed, p=p / p.sum()))

    def target(self):
        """The shape an op's result broadcasts to: usually a full-size family shape."""
        if len(self.families) > 1 and self.rng.random() < 0.5:
            return self.families[int(self.rng.integers(len(self.families)))]
        # the family of the most recent full-size value
        for v in reversed(self.vals):
            if v.shape in self.families:
                return v.shape
        return self.families[0]

    def operand(self, dtype, target, literal_ok=True, exact=False):
        """A value of dtype whose shape broadcasts to `target` (or equals it): an existing
        one, a convert of one, a Python literal, a new input, or a broadcast_in_dim."""
        rng = self.rng
        cands = [v for v in self.vals if v.dtype == dtype and
                 (v.shape == target if exact else _dominates(target, v.shape))]
        if cands and rng.random() < 0.7:
            # favour recent values (chains), sometimes any (DAGs, values read twice)
            return (cands[-1 - int(rng.integers(min(3, len(cands))))] if rng.random() < 0.7
                    else cands[int(rng.integers(len(cands)))]).name
        c = rng.random()
        if c < 0.3:
            others = [v for v in self.vals if v.dtype != dtype and
                      (v.shape == target if exact else _dominates(target, v.shape))]
            if others:
                src = others[-1 - int(rng.integers(min(4, len(others))))]
                return self.node("convert_element_type", [src.name], dtype, src.shape, new_dtype=dtype)
        if c < 0.45 and literal_ok and not exact:
            return self.literal(dtype)
        if c < 0.6 and len(target) > 0:
            # broadcast_in_dim of a smaller operand: any subset of the target's axes
            keep = sorted(int(d) for d in rng.choice(len(target), size=int(rng.integers(0, len(target) + 1)),
                                                     replace=False))
            oshape = tuple(target[d] if rng.random() < 0.8 else 1 for d in keep)
            src = self.operand(dtype, oshape, literal_ok=False, exact=True) if rng.random() < 0.4 \
                else self.new_input(dtype, oshape)
            return self.node("broadcast_in_dim", [src], dtype, target, shape=list(target),
                             broadcast_dimensions=keep)
        shape = target if exact or rng.random() < 0.4 else _sub_shape(rng, target)
        return self.new_input(dtype, shape)

    def broadcast_operand(self, dtype, target):
        """A new operand smaller than target that is not a scalar, read with broadcast
        strides: periodic, row-constant or general loads in the fused program."""
        rng = self.rng
        nz = [d for d in range(len(target)) if target[d] > 1]
        if len(nz) < 2:
            return self.operand(dtype, target, literal_ok=False)
        keep = sorted(int(d) for d in rng.choice(nz, size=int(rng.integers(1, len(nz))), replace=False))
        if rng.random() < 0.5:   # NumPy broadcasting: size-1 axes (and fewer leading axes)
            shape = tuple(target[d] if d in keep else 1 for d in range(len(target)))
            lead = 0
            while lead < keep[0] and rng.random() < 0.5:
                lead += 1
            return self.new_input(dtype, shape[lead:])
        src = self.new_input(dtype, tuple(target[d] for d in keep))
        return self.node("broadcast_in_dim", [src], dtype, target, shape=list(target), broadcast_dimensions=keep)

    def literal(self, dtype):
        if dtype in FLOATS:
            return str(self.rng.choice(FLOAT_LITERALS))
        if dtype == "bool":
            return str(self.rng.choice(["True", "False"]))
        return str(self.rng.choice(INT_LITERALS[dtype]))

    def bshape(self, *names):
        return tuple(np.broadcast_shapes(*[self.shape_of(n) for n in names]))

    # -- steps --
    def step(self):
        rng = self.rng
        kinds = ["unary", "binary", "ipow", "is_finite", "convert", "compare", "select", "logical", "not",
                 "clamp", "reshape", "colsum", "int_unary", "int_binary", "float_other", "other_reduce",
                 "int_misc"]
        w = np.array([14, 16, 4, 2, 9, 7, 7, 3, 1.5, 3, 3, 3.5, 2, 3, 2, 1, 1])
        if self.mode != "mixed":
            w[12:] = 0
        kind = str(rng.choice(kinds, p=w / w.sum()))
        t = self.target()
        if kind == "unary":
            d = self.pick_dtype(FLOATS)
            a = self.operand(d, t, literal_ok=False)
            return self.node(str(rng.choice(FUSED_UNARY)), [a], d, self.shape_of(a))
        if kind == "binary":
            d = self.pick_dtype(FLOATS)
            a, b = self.operand(d, t), self.operand(d, t) if rng.random() < 0.7 else self.broadcast_operand(d, t)
            if _is_literal(a) and _is_literal(b):
                b = self.operand(d, t, literal_ok=False)
            if rng.random() < 0.5:
                a, b = b, a
            return self.node(str(rng.choice(FUSED_BINARY)), [a, b], d, self.bshape(a, b))
        if kind == "ipow":
            d = self.pick_dtype(FLOATS)
            a = self.operand(d, t, literal_ok=False)
            y = int(rng.choice([-7, -4, -3, -2, -1, 0, 1, 2, 2, 3, 3, 4, 5, 7, 8, 13, 31]))
            return self.node("integer_pow", [a], d, self.shape_of(a), y=y)
        if kind == "is_finite":
            a = self.operand(self.pick_dtype(FLOATS), t, literal_ok=False)
            return self.node("is_finite", [a], "bool", self.shape_of(a))
        if kind == "convert":
            src = self.operand(self.pick_dtype(DTYPES), t, literal_ok=False)
            d = str(rng.choice(DTYPES)) if rng.random() < 0.9 else self.val(src).dtype  # to itself: an alias
            return self.node("convert_element_type", [src], d, self.shape_of(src), new_dtype=d)
        if kind == "compare":
            d = self.pick_dtype(DTYPES)
            a, b = self.operand(d, t), self.operand(d, t) if rng.random() < 0.7 else self.broadcast_operand(d, t)
            if _is_literal(a) and _is_literal(b):
                a = self.operand(d, t, literal_ok=False)
            return self.node(str(rng.choice(COMPARE)), [a, b], "bool", self.bshape(a, b))
        if kind == "select":
            d = self.pick_dtype(DTYPES)
            p = self.operand("bool", t, literal_ok=False)
            # (no literals: bind gives a Python scalar the first array operand's dtype, bool here)
            a = self.operand(d, t, literal_ok=False)
            b = self.operand(d, t, literal_ok=False) if rng.random() < 0.7 else self.broadcast_operand(d, t)
            return self.node("select", [p, a, b], d, self.bshape(p, a, b))
        if kind == "logical":
            a, b = self.operand("bool", t), self.operand("bool", t, literal_ok=False)
            return self.node(str(rng.choice(LOGICAL)), [a, b], "bool", self.bshape(a, b))
        if kind == "not":
            a = self.operand("bool", t, literal_ok=False)
            return self.node("not", [a], "bool", self.shape_of(a))
        if kind == "clamp":
            d = self.pick_dtype(FLOATS)
            x = self.operand(d, t, literal_ok=False)
            lo, hi = self.operand(d, t), self.operand(d, t)
            return self.node("clamp", [lo, x, hi], d, self.bshape(lo, x, hi))
        if kind == "reshape":
            full = [v for v in self.vals if v.shape in self.families and v.shape]
            if not full:
                return None
            v = full[-1 - int(rng.integers(min(3, len(full))))]
            n = int(np.prod(v.shape))
            others = [f for f in self.families if f != v.shape]
            if others and rng.random() < 0.6:
                shape = others[int(rng.integers(len(others)))]
            else:
                shape = _factor(rng, n, int(rng.integers(1, 5)))
                if shape not in self.families and len(self.families) < 3:
                    self.families.append(shape)
                elif shape not in self.families:
                    shape = self.families[0] if self.families[0] != v.shape else self.families[-1]
            if shape == v.shape:
                return None
            return self.node("reshape", [v.name], v.dtype, shape, new_sizes=list(shape))
        if kind == "colsum":  # reduce_sum over leading axes: fused into the pass that computes x
            # (BatchNorm statistics); the summed value must be computed in the group
            d = str(rng.choice(["float32", "bfloat16"]))
            ks = [k for k in range(1, len(t)) if np.prod(t[:k]) > 1 and np.prod(t[k:]) > 1]
            if not ks:
                return None
            computed = [v for v in self.nodes if v.dtype == d and v.shape == t and v.prim != "reshape"]
            if computed and rng.random() < 0.7:
                x = computed[-1 - int(rng.integers(min(3, len(computed))))].name
            else:
                src = self.operand(d, t, literal_ok=False, exact=True)
                b = self.operand(d, t)
                x = self.node(str(rng.choice(["mul", "add", "sub", "max"])), [src, b], d, t)
            k = int(rng.choice(ks))
            return self.node("reduce_sum", [x], d, t[k:], axes=list(range(k)))
        if kind == "int_unary":
            d = self.pick_dtype(INTS)
            a = self.operand(d, t, literal_ok=False)
            return self.node(str(rng.choice(INT_UNARY)), [a], d, self.shape_of(a))
        if kind == "int_binary":
            d = self.pick_dtype(INTS)
            a, b = self.operand(d, t, literal_ok=False), self.operand(d, t)
            return self.node(str(rng.choice(INT_BINARY)), [a, b], d, self.bshape(a, b))
        if kind == "float_other":
            d = self.pick_dtype(FLOATS)
            if rng.random() < 0.5:
                a = self.operand(d, t, literal_ok=False)
                prim = str(rng.choice(FLOAT_OTHER_UNARY))
                attrs = {"rounding_method": int(rng.integers(2))} if prim == "round" else {}
                return self.node(prim, [a], d, self.shape_of(a), **attrs)
            a, b = self.operand(d, t, literal_ok=False), self.operand(d, t)
            return self.node(str(rng.choice(FLOAT_OTHER_BINARY)), [a, b], d, self.bshape(a, b))
        if kind == "other_reduce":  # over trailing axes (not a column sum), kept as size-1 axes
            if len(t) < 1:
                return None
            d = str(rng.choice(["float32", "bfloat16", "float64", "int32"]))
            x = self.operand(d, t, literal_ok=False, exact=True)
            k = int(rng.integers(0, len(t)))
            prim = str(rng.choice(["reduce_sum", "reduce_max"]))
            r = self.node(prim, [x], d, t[:k], axes=list(range(k, len(t))))
            keep = t[:k] + (1,) * (len(t) - k)
            return self.node("reshape", [r], d, keep, new_sizes=list(keep))
        if kind == "int_misc":  # integer_pow and clamp on integers (not fused)
            d = self.pick_dtype(INTS)
            a = self.operand(d, t, literal_ok=False)
            if rng.random() < 0.5:
                return self.node("integer_pow", [a], d, self.shape_of(a), y=int(rng.integers(0, 6)))
            lo, hi = self.operand(d, t), self.operand(d, t)
            return self.node("clamp", [lo, a, hi], d, self.bshape(lo, a, hi))
        raise AssertionError(kind)

    def build(self):
        rng = self.rng
        for _ in range(int(rng.integers(1, 4))):
            self.new_input(self.pick_dtype(["float32", "bfloat16", "float64", "int32", "bool"], recent=False),
                           self.full)
        steps = int(rng.integers(30, 70)) if self.mode == "long" else int(min(40, rng.geometric(1 / 10)))
        for _ in range(steps):
            self.step()
        nodes = [n.name for n in self.nodes]
        outs = [nodes[-1]] if nodes else [self.vals[-1].name]
        for _ in range(int(rng.integers(0, 4))):
            pool = nodes or [v.name for v in self.vals]
            o = pool[int(rng.integers(len(pool)))]
            if o not in outs:
                outs.append(o)
        if self.mode == "long" or rng.random() < 0.3:   # every value nobody reads: nothing dead
            used = {a for n in self.nodes for a in n.args}
            outs += [n for n in nodes if n not in used and n not in outs][-8:]
        prog = _prune(Program(self.seed, self.inputs, self.nodes, outs))
        for i in prog.inputs:
            i.array = make_values(np.random.default_rng(i.vseed), i.dtype, i.shape)
        return prog


def _is_literal(name):
    return not re.match(r"^[xcv]\d+$", name)


def generate(seed):
    """The random program of this seed (the same on every host)."""
    return Generator(seed).build()


# ---- configurations --------------------------------------------------------------------
@dataclass
class Config:
    name: str
    fusion: bool = True
    isa: str = None           # None: the host's best
    fused_jit: bool = False
    threads: int = None       # None: podlet's default
    eager: bool = False
    excess: bool = False      # config allow_excess_precision (bf16 kept f32 inside a fusion)
    ways: int = 8             # the JIT's most vectors per iteration (_core.set_fused_jit_ways)
    tables: bool = True       # values of one bf16 value read from tables (_core.set_fused_tables)

    def run(self, prog, fn, jitted):
        """The outputs of prog (fn: its Python function, jitted: podlet.jit(fn)) as
        NumPy arrays, and how many fused programs ran as compiled code."""
        with _configured(self):
            before = _core.fused_jit_stats()["runs"]
            outs = fn(*prog.args()) if self.eager else jitted(*prog.args())
            outs = [np.array(o, copy=True) for o in outs]
            return outs, _core.fused_jit_stats()["runs"] - before


_DEFAULT_THREADS = podlet.config.num_threads
_BEST_ISA = podlet.cpu_info()["best_isa"]
_START_ISA = _core.active_isa()   # restored after each run (PODLET_ISA may have lowered it)


@contextlib.contextmanager
def _configured(cfg):
    old_env = os.environ.get("PODLET_FUSION")
    os.environ["PODLET_FUSION"] = "1" if cfg.fusion else "0"
    _core.set_isa(cfg.isa or _BEST_ISA)
    _core.set_fused_jit(cfg.fused_jit)
    _core.set_fused_jit_ways(cfg.ways)
    _core.set_fused_tables(cfg.tables)
    podlet.config.update("num_threads", cfg.threads or _DEFAULT_THREADS)
    podlet.config.update("allow_excess_precision", cfg.excess)
    try:
        yield
    finally:
        if old_env is None:
            os.environ.pop("PODLET_FUSION", None)
        else:
            os.environ["PODLET_FUSION"] = old_env
        _core.set_isa(_START_ISA)
        _core.set_fused_jit(podlet.config.fused_jit)
        _core.set_fused_jit_ways(8)
        _core.set_fused_tables(True)
        podlet.config.update("num_threads", _DEFAULT_THREADS)
        podlet.config.update("allow_excess_precision", False)


def available_configs(excess=False):
    """Every configuration this host can run; the first is the reference (unfused). With
    excess (allow_excess_precision), fused configurations only: an unfused graph rounds
    every op, so the reference is the interpreter at the baseline ISA."""
    info = podlet.cpu_info()
    isas = [i for i in info["available_isas"] if i not in ("avx512bf16", "amx")]  # the fused kernels stop at avx512
    cfgs = [] if excess else [Config("unfused", fusion=False), Config("eager", eager=True)]
    cfgs += [Config(f"fused/{isa}", isa=isa, excess=excess) for isa in isas]
    if "avx512" in isas:   # the JIT compiles only where the active ISA is AVX-512
        # one vector per iteration; up to eight (the default); and on AVX512_BF16 hosts the
        # bf16 roundings by vcvtneps2bf16 / vcvtne2ps2bf16 (fused_jit.cc)
        cfgs.append(Config("fused/jit-1way", isa="avx512", fused_jit=True, excess=excess, ways=1))
        cfgs.append(Config("fused/jit", isa="avx512", fused_jit=True, excess=excess))
        if "avx512bf16" in info["available_isas"]:
            cfgs.append(Config("fused/jit-avx512bf16", isa="avx512bf16", fused_jit=True, excess=excess))
    best = cfgs[-1]
    if _DEFAULT_THREADS != 1:
        cfgs.append(Config(best.name + "/1thread", isa=best.isa, fused_jit=best.fused_jit, threads=1, excess=excess))
    # every fused configuration above reads tables where a program has them (prims/fused.cc,
    # 65536 elements and up); the best one again computing every value instead
    cfgs.append(Config(best.name + "/notables", isa=best.isa, fused_jit=best.fused_jit, excess=excess, tables=False))
    return cfgs


# ---- comparison -----------------------------------------------------------------------
def bits(a):
    """The array's raw bytes as unsigned integers of its element width (floats, bools and
    ints alike: a NaN payload, the sign of a zero or a bool byte of 2 all count)."""
    a = np.array(a, copy=True, order="C") if not a.flags.c_contiguous else a
    return a.view(BITS[_dtype_name(a)])


def _dtype_name(a):
    return "bfloat16" if a.dtype == BF16 else a.dtype.name


@dataclass
class Mismatch:
    config: str
    output: int
    what: str                  # "dtype", "shape", "count", "bits", "error"
    index: tuple = None        # first differing element (bits)
    count: int = 0             # differing elements
    ref: object = None         # reference / other element (bits)
    other: object = None
    detail: str = ""

    def __str__(self):
        if self.what == "bits":
            return (f"{self.config}: output {self.output} differs in {self.count} element(s); first at "
                    f"{self.index}: unfused {_fmt(self.ref)} vs {_fmt(self.other)}")
        return f"{self.config}: output {self.output}: {self.what} {self.detail}"


def _fmt(x):
    """An element as value and hex bits."""
    a = np.asarray(x)
    b = int(bits(a.reshape(1))[0])
    w = a.dtype.itemsize * 2
    return f"{a.item()!r} (0x{b:0{w}x} {_dtype_name(a)})"


def compare(ref, other, config):
    """Mismatches between two lists of output arrays, bit for bit."""
    out = []
    if len(ref) != len(other):
        return [Mismatch(config, -1, "count", detail=f"{len(ref)} vs {len(other)} outputs")]
    for k, (r, o) in enumerate(zip(ref, other)):
        if _dtype_name(r) != _dtype_name(o):
            out.append(Mismatch(config, k, "dtype", detail=f"{_dtype_name(r)} vs {_dtype_name(o)}"))
            continue
        if r.shape != o.shape:
            out.append(Mismatch(config, k, "shape", detail=f"{r.shape} vs {o.shape}"))
            continue
        br, bo = bits(r), bits(o)
        diff = br != bo
        if diff.any():
            idx = tuple(int(i) for i in np.argwhere(diff)[0])
            out.append(Mismatch(config, k, "bits", idx, int(diff.sum()), r[idx], o[idx]))
    return out


# ---- running ----------------------------------------------------------------------------
@dataclass
class Result:
    mismatches: list
    compiled: int = 0          # fused programs that ran as AVX-512 code (fused/jit)
    fused_nodes: int = 0
    instrs: list = field(default_factory=list)   # (opcode name, operand dtype, result dtype) fused
    features: list = field(default_factory=list)  # interpreter paths (fused_instructions)


def run_program(prog, configs, perturb=None):
    """Runs prog under every configuration and compares each with the first. perturb:
    (config name, fn(outputs) -> outputs), a self-test that changes one configuration's
    results after the fact."""
    fn = prog.function()
    jitted = podlet.jit(fn)
    res = Result([])
    ref = None
    for cfg in configs:
        try:
            outs, compiled = cfg.run(prog, fn, jitted)
        except Exception as e:  # noqa: BLE001 - a configuration that raises is a mismatch too
            if ref is None:
                raise
            res.mismatches.append(Mismatch(cfg.name, -1, "error", detail=f"{type(e).__name__}: {e}"))
            continue
        if perturb is not None and perturb[0] == cfg.name:
            outs = perturb[1](outs)
        if cfg.fused_jit:
            res.compiled += compiled
        if ref is None:
            ref = outs
        else:
            res.mismatches += compare(ref, outs, cfg.name)
    try:
        with _configured(Config("coverage")):
            g = _fusion.executable_graph(jitted.lower(*prog.args()))
        res.fused_nodes = g.prim_counts().get("fused_elementwise", 0)
        res.instrs, res.features = fused_instructions(g.dump())
    except Exception:  # noqa: BLE001 - coverage only
        pass
    return res


def _attr_ints(text, key):
    m = re.search(r"\b" + key + r"=\[([0-9,\-]*)\]", text)
    return [int(c) for c in m.group(1).split(",") if c] if m else []


def _load_kind(dims, st):
    """prims/fused.cc classify(): how the interpreter reads a load."""
    md, ms = [], []
    for d, s in zip(reversed(dims), reversed(st)):
        if d == 1:
            continue
        if md and s == ms[-1] * md[-1]:
            md[-1] *= d
            continue
        md.append(d)
        ms.append(s)
    md.reverse()
    ms.reverse()
    if all(s == 0 for s in ms):
        return "scalar"
    if len(md) == 1 and ms[0] == 1:
        return "full"
    if len(md) == 2 and ms == [0, 1]:
        return "periodic" + ("/tile-invariant" if TILE % md[1] == 0 else "")
    if len(md) == 2 and ms == [1, 0]:
        return "row-constant"
    return "general"


def fused_instructions(dump):
    """From a Graph.dump(): (opcode, operand dtype, result dtype) of every instruction of
    the fused nodes, and the interpreter paths they take (prims/fused.cc: load patterns,
    column sums, chunking, non-temporal outputs)."""
    instrs, feats = [], []
    for line in dump.splitlines():
        if "= fused_elementwise(" not in line:
            continue
        code = _attr_ints(line, "code")
        for k in range(0, len(code) - 6, 7):
            op, d, rd = code[k:k + 3]
            if 0 <= op < len(OPCODES):
                instrs.append((OPCODES[op], DTYPE_CODES[d], DTYPE_CODES[rd]))
        loads = _attr_ints(line, "loads")
        k = 0
        while k < len(loads):
            r = loads[k + 1]
            feats.append("load " + _load_kind(loads[k + 2:k + 2 + r], loads[k + 2 + r:k + 2 + 2 * r]))
            k += 2 + 2 * r
        m = re.search(r"\bn=(\d+)", line)
        n, nins = (int(m.group(1)) if m else 0), len(code) // 7
        if "reduce_inner" in line:
            feats.append("column sums")
        elif n < 4 * CHUNK and n * nins >= 32 * CHUNK:
            feats.append("short program cut into 4 chunks")
        feats.append("n % 16 != 0" if n % 16 else "n % 16 == 0")
        if n > CHUNK:
            feats.append("several chunks")
        outs = _attr_ints(line, "outs")
        k = 0
        while k < len(outs):
            r = outs[k + 1]
            if int(np.prod(outs[k + 2:k + 2 + r], dtype=np.int64)) * 4 >= 4 << 20:
                feats.append("output >= 4 MB (streamed on AVX-512)")
            k += 2 + r
    return instrs, feats


# ---- shrinking ------------------------------------------------------------------------
def _still_fails(prog, configs, perturb=None):
    try:
        return bool(run_program(prog, configs, perturb).mismatches)
    except Exception:  # noqa: BLE001 - a program the reference cannot run is not a reproducer
        return False


def _with(prog, **kw):
    d = dict(seed=prog.seed, inputs=list(prog.inputs), nodes=list(prog.nodes), outputs=list(prog.outputs))
    d.update(kw)
    return _prune(Program(**d))


def _prune(prog):
    """Drops nodes and inputs the outputs do not need."""
    need = set(prog.outputs)
    keep = []
    for n in reversed(prog.nodes):
        if n.name in need:
            keep.append(n)
            need.update(a for a in n.args if not _is_literal(a))
    keep.reverse()
    return Program(prog.seed, [i for i in prog.inputs if i.name in need], keep, prog.outputs)


def _replace_uses(prog, old, new):
    """prog with every use of value `old` reading `new` instead."""
    nodes = [Node(n.name, n.dtype, n.shape, n.prim, [new if a == old else a for a in n.args], n.attrs)
             for n in prog.nodes if n.name != old]
    return _with(prog, nodes=nodes, outputs=[new if o == old else o for o in prog.outputs])


def _value_of(prog, name):
    """Value `name` of prog, computed eagerly (unfused)."""
    sub = _with(prog, outputs=[name])
    with _configured(Config("eager", eager=True)):
        return np.array(sub.function()(*sub.args())[0], copy=True)


def shrink(prog, configs, perturb=None, budget=30.0):
    """A smaller program that still mismatches: one output; outputs peeled (an output
    replaced by one of its operands); nodes cut away, each replaced by an input holding
    the value it computed (unfused). Every step is kept only if a mismatch remains."""
    t0 = time.time()
    res = run_program(prog, configs, perturb)
    if not res.mismatches:
        return prog
    first = next((m for m in res.mismatches if m.output >= 0), None)
    if first is not None:
        cand = _with(prog, outputs=[prog.outputs[first.output]])
        if _still_fails(cand, configs, perturb):
            prog = cand
        else:   # the other outputs matter (they keep a group together): drop them one by one
            keep = prog.outputs[first.output]
            for o in list(prog.outputs):
                if o != keep and time.time() - t0 < budget:
                    cand = _with(prog, outputs=[x for x in prog.outputs if x != o])
                    if _still_fails(cand, configs, perturb):
                        prog = cand
    changed = True
    while changed and time.time() - t0 < budget:
        changed = False
        if len(prog.outputs) == 1:   # peel: the output's operand, if that alone mismatches
            out = next((n for n in prog.nodes if n.name == prog.outputs[0]), None)
            for a in (out.args if out is not None else []):
                if not _is_literal(a) and any(n.name == a for n in prog.nodes):
                    cand = _with(prog, outputs=[a])
                    if _still_fails(cand, configs, perturb):
                        prog, changed = cand, True
                        break
            if changed:
                continue
        for n in list(prog.nodes):
            if time.time() - t0 > budget:
                break
            if n.name in prog.outputs or n.name not in {m.name for m in prog.nodes}:
                continue
            # bypass: the node's uses read one of its operands of the same dtype and shape
            vals = {v.name: v for v in prog.inputs + prog.nodes}
            same = [a for a in n.args if a in vals and vals[a].dtype == n.dtype and vals[a].shape == n.shape]
            cand = next((c for c in (_replace_uses(prog, n.name, a) for a in same)
                         if _still_fails(c, configs, perturb)), None)
            if cand is not None:
                prog, changed = cand, True
                continue
            arr = _value_of(prog, n.name)
            inp = Input(n.name, n.dtype, n.shape, "arg", arr.copy())
            nodes = [m for m in prog.nodes if m.name != n.name]
            cand = _with(prog, inputs=prog.inputs + [inp], nodes=nodes)
            if _still_fails(cand, configs, perturb):
                prog, changed = cand, True
    return prog


# ---- reporting ---------------------------------------------------------------------------
def _input_values_at(prog, out_shape, index):
    """Each input's element that output element `index` reads (inputs that broadcast to the
    output's shape)."""
    lines = []
    for i in prog.inputs:
        if not _dominates(out_shape, i.shape):
            lines.append(f"    {i.name}: {i.dtype}{list(i.shape)} (does not broadcast to the output)")
            continue
        lead = len(out_shape) - len(i.shape)
        idx = tuple(0 if s == 1 else index[lead + d] for d, s in enumerate(i.shape))
        lines.append(f"    {i.name}{list(idx)} = {_fmt(i.array[idx])}")
    return lines


def signature(prog, mismatches):
    """What a (shrunk) mismatch is about: its primitives with their dtypes, and the
    configurations that differ. Mismatches with one signature most likely share a cause."""
    prims = sorted({f"{n.prim}:{n.dtype}" for n in prog.nodes})
    cfgs = sorted({m.config for m in mismatches})
    return f"[{' '.join(prims)}] in {' '.join(cfgs)}"


def reproducer(prog, mismatches, configs, perturb=None, do_shrink=True):
    """(text describing a mismatching program, shrunk; its signature)."""
    small = shrink(prog, configs, perturb) if do_shrink else prog
    res = run_program(small, configs, perturb)
    ms = res.mismatches or mismatches
    text = [f"MISMATCH program seed {prog.seed} (replay: .venv/bin/python fuzz/fused_diff.py --replay {prog.seed})"]
    text += [f"  {m}" for m in mismatches[:8]]
    if small is not prog:
        text.append(f"shrunk to {len(small.nodes)} primitive(s) (values cut from the program are inputs "
                    f"holding what the unfused graph computed there):")
        text += [f"  {m}" for m in ms[:8]]
    text.append(small.source())
    m = next((m for m in ms if m.what == "bits"), None)
    if m is not None:
        out = small.outputs[m.output]
        shape = next(v.shape for v in small.inputs + small.nodes if v.name == out)
        text.append(f"  inputs read by output {m.output} ({out}) at {list(m.index)}:")
        text += _input_values_at(small, shape, m.index)
    text.append(f"  fused programs: {res.fused_nodes}; instructions: "
                + ", ".join(sorted({f'{o}:{d}->{r}' for o, d, r in res.instrs if o != 'load'})))
    sig = signature(small, ms)
    text.append(f"  signature: {sig}")
    return "\n".join(text), sig


# ---- main ------------------------------------------------------------------------------
def fuzz(seed, programs=None, seconds=None, configs=None, perturb=None, verbose=False, out=None, shrink_max=12):
    """Runs programs seed*1e6 + i, i = 0, 1, ... until `programs` ran or `seconds`
    passed (shrinking mismatches included). The first `shrink_max` mismatches are shrunk
    and the first of each signature printed in full, later ones as one line. Returns a summary dict
    (mismatching seeds under "mismatches", by signature under "signatures"; programs the
    reference itself cannot run -- a generator bug -- under "invalid")."""
    configs = configs or available_configs()
    out = out or sys.stdout
    t0, c0, jit0, tab0 = time.time(), time.process_time(), _core.fused_jit_stats(), _core.fused_tables_stats()
    n = fused_progs = compiled = 0
    bad, invalid, sigs = [], [], {}
    shrink_s = 0.0
    cover, paths = {}, {}
    elements = 0
    i = 0
    while True:
        if programs is not None and n >= programs:
            break
        if seconds is not None and time.time() - t0 >= seconds:
            break
        pseed = seed * 1_000_000 + i
        i += 1
        prog = generate(pseed)
        if verbose:
            print(f"program {pseed}: {prog.describe()}", file=out, flush=True)
        try:
            res = run_program(prog, configs, perturb)
        except Exception as e:  # noqa: BLE001 - the reference failed: the generator made a bad program
            invalid.append(pseed)
            print(f"INVALID program seed {pseed} (the unfused reference raised): {type(e).__name__}: {e}",
                  file=out, flush=True)
            continue
        n += 1
        elements += prog.numel()
        fused_progs += res.fused_nodes > 0
        compiled += res.compiled
        for ins in res.instrs:
            cover[ins] = cover.get(ins, 0) + 1
        for f in set(res.features):
            paths[f] = paths.get(f, 0) + 1
        if res.mismatches:
            bad.append(pseed)
            if len(bad) > shrink_max:   # enough shrinking: one line each
                print(f"MISMATCH program seed {pseed} (not shrunk): {res.mismatches[0]}", file=out, flush=True)
                sigs.setdefault("(not shrunk)", []).append(pseed)
                continue
            ts = time.time()
            text, sig = reproducer(prog, res.mismatches, configs, perturb)
            shrink_s += time.time() - ts
            if sig not in sigs:
                print(text, file=out, flush=True)
            else:
                print(f"MISMATCH program seed {pseed}: {res.mismatches[0]}; signature as seed {sigs[sig][0]}: {sig}",
                      file=out, flush=True)
            sigs.setdefault(sig, []).append(pseed)
    dt = time.time() - t0
    jit1 = _core.fused_jit_stats()
    return {"programs": n, "seconds": dt, "cpu_seconds": time.process_time() - c0, "per_second": n / (dt - shrink_s) if dt > shrink_s else 0.0,
            "shrink_seconds": shrink_s, "fused_programs": fused_progs, "compiled_runs": compiled,
            "way_runs": [b - a for a, b in zip(jit0["way_runs"], jit1["way_runs"])],
            "spill_runs": jit1["spill_runs"] - jit0["spill_runs"],
            "table_runs": _core.fused_tables_stats()["runs"] - tab0["runs"],
            "mismatches": bad, "signatures": sigs, "invalid": invalid, "configs": [c.name for c in configs],
            "coverage": cover, "paths": paths, "elements": elements}


def summary_text(s):
    ops = {}
    for (o, d, r), c in s["coverage"].items():
        if o == "load":
            continue
        key = o if o != "convert" else f"convert {d}->{r}"
        ops.setdefault(key, set()).add(d if o != "convert" else "")
    conv = sorted(k for k in ops if k.startswith("convert"))
    lines = [
        f"configurations compared: {', '.join(s['configs'])} (reference: {s['configs'][0]})",
        f"programs run: {s['programs']} in {s['seconds']:.1f} s ({s['per_second']:.1f} programs/s"
        + (f", not counting {s['shrink_seconds']:.1f} s spent shrinking mismatches" if s["shrink_seconds"] else "")
        + f"; {s['cpu_seconds']:.1f} s of CPU time, all threads, shrinking included); "
        f"{s['fused_programs']} had fused nodes; {s['compiled_runs']} fused runs as compiled AVX-512 code "
        f"(by vectors per iteration: {', '.join(f'{w + 1}: {n}' for w, n in enumerate(s['way_runs']) if n)}; "
        f"with scalars kept in memory: {s['spill_runs']}); {s['table_runs']} fused runs read values from tables",
        "fused instructions seen (operand dtypes): " + "; ".join(
            f"{k} [{','.join(sorted(v))}]" for k, v in sorted(ops.items()) if not k.startswith("convert")),
        f"fused converts seen: {len(conv)} of {len(DTYPES) * len(DTYPES)} dtype pairs",
        "programs by interpreter path: " + "; ".join(f"{k} {v}" for k, v in sorted(s["paths"].items())),
        f"mismatching programs: {len(s['mismatches'])}"
        + (f" (seeds {s['mismatches'][:20]})" if s["mismatches"] else ""),
    ]
    for sig, seeds in s["signatures"].items():
        lines.append(f"  {len(seeds)} x {sig} (seeds {seeds[:10]})")
    if s["invalid"]:
        lines.append(f"invalid programs (generator bugs): {len(s['invalid'])} (seeds {s['invalid'][:10]})")
    return "\n".join(lines)


def _flip_last_bit(outs):
    """--perturb: the lowest bit of the first element of the first output flipped."""
    outs = [o.copy() for o in outs]
    b = bits(outs[0]).reshape(-1)
    if b.size:
        b[0] ^= 1
    return outs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="run seed (program i has seed SEED*1000000+i)")
    ap.add_argument("--seconds", type=float, help="run for this long")
    ap.add_argument("--programs", type=int, help="run this many programs")
    ap.add_argument("--replay", type=int, metavar="PROGRAM_SEED", help="run one program, shrink a mismatch")
    ap.add_argument("--show", type=int, metavar="PROGRAM_SEED", help="print one program and exit")
    ap.add_argument("--verbose", action="store_true", help="print each program's seed before it runs")
    ap.add_argument("--excess", action="store_true",
                    help="every fused configuration under allow_excess_precision, against the interpreter at "
                         "the baseline ISA under it (no unfused reference: it rounds every bf16 op)")
    ap.add_argument("--perturb", action="store_true",
                    help="self-test: flip one bit of the best fused configuration's first output, "
                         "which must be reported (exit 1)")
    a = ap.parse_args(argv)
    try:
        faulthandler.enable()   # a crash still names the program (with --verbose)
    except (AttributeError, ValueError, OSError):  # no real stderr (pytest's capture)
        pass
    podlet.config.update("enable_x64", True)   # float64 programs
    if a.show is not None:
        p = generate(a.show)
        print(f"# {p.describe()}\n{p.source()}")
        return 0
    configs = available_configs(a.excess)
    perturb = (configs[-1].name, _flip_last_bit) if a.perturb else None
    if a.replay is not None:
        p = generate(a.replay)
        res = run_program(p, configs, perturb)
        if res.mismatches:
            print(reproducer(p, res.mismatches, configs, perturb)[0])
            return 1
        print(f"program {a.replay}: no mismatch across {', '.join(c.name for c in configs)} "
              f"({res.fused_nodes} fused nodes)\n{p.source()}")
        return 0
    if a.seconds is None and a.programs is None:
        a.programs = 100
    s = fuzz(a.seed, programs=a.programs, seconds=a.seconds, configs=configs, perturb=perturb,
             verbose=a.verbose)
    print(summary_text(s))
    return 1 if s["mismatches"] else 2 if s["invalid"] else 0


if __name__ == "__main__":
    sys.exit(main())
