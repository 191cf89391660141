"""ONNX export of any podlet model: its traced primitives, one by one, as ONNX operators.

    podlet.export.to_onnx(model, variables, jnp.zeros((1, 224, 224, 1)), "model.onnx")

The model is traced in eval mode (``train=False`` / ``deterministic=True``) on the
sample input's shape and dtype; the variables become initializers (BatchNorm's running
statistics arrive already folded into a scale and a shift, since that arithmetic runs
on concrete values while tracing). podlet's layouts are Flax's (NHWC activations, HWIO
kernels), so a convolution or pooling becomes Transpose -> Conv/MaxPool (NCHW) ->
Transpose; onnxruntime's optimizer cancels the transposes between consecutive layers.
Transformers need nothing special: LayerNorm / RMSNorm and softmax arrive as their fused
primitives (LayerNormalization, Softmax, LogSoftmax; or as elementwise and reduction
primitives with podlet.config fused_norms off), GELU as its elementwise primitives,
attention as batched dot_generals (MatMul) or the fused node, a
ViT's class token as a concatenate, a Swin's relative position bias as a take (folded
when the table is a weight), its shifted windows as slices + concatenate (static rolls)
and its masks as a select. podlet.models' ResNets, ViTs and Swins are checked against
onnxruntime in tests/test_export_onnx.py.
The graph has fixed shapes, those of the sample input; with ``dynamic_batch=True`` its
batch size is symbolic instead (``_dynamic.py``: traced at three batch sizes, the
shapes that change computed from the input's shape at run time).
"""
import inspect
import os
import tempfile

import numpy as np

from .._src import dtypes
from .._src.errors import PodletError
from . import _dynamic, _record
from ._dynamic import DynamicBatchError

__all__ = ["to_onnx", "UnsupportedPrimitiveError", "DynamicBatchError", "SUPPORTED_PRIMITIVES", "DEFAULT_OPSET"]

DEFAULT_OPSET = 17


class UnsupportedPrimitiveError(PodletError):
    """A traced primitive has no ONNX mapping."""


def _onnx():
    try:
        import onnx
    except ImportError:
        raise PodletError("ONNX export needs the 'onnx' package: pip install 'podlet[onnx]' "
                          "(or pip install onnx)") from None
    return onnx


_ONNX_DTYPES = {"float32": "FLOAT", "float64": "DOUBLE", "bfloat16": "BFLOAT16", "float16": "FLOAT16",
                "int32": "INT32", "uint32": "UINT32", "uint8": "UINT8", "bool": "BOOL", "int64": "INT64"}


def _elem_type(name):
    try:
        return getattr(_onnx().TensorProto, _ONNX_DTYPES[name])
    except KeyError:
        raise PodletError(f"ONNX export: dtype {name} has no ONNX equivalent") from None


class _Builder:
    """Emits ONNX nodes; values are ONNX names, constants are folded in NumPy."""

    def __init__(self, rec, opset):
        self.onnx = _onnx()
        self.rec, self.opset = rec, opset
        self.nodes, self.inits = [], []
        self.const = {}        # name -> NumPy value, for names that are initializers
        self.names = {}        # podlet value id -> ONNX name
        self.counter = 0
        self.current = None    # the podlet node being lowered (None: the graph's own nodes)
        self.origin = {}       # initializer name -> the podlet node it was made for
        self.node_origin = []  # per ONNX node, the podlet node it was emitted for

    # -- names and constants
    def fresh(self, hint="t"):
        self.counter += 1
        return f"{hint}_{self.counter}"

    def constant(self, value, hint="c"):
        value = np.asarray(value)
        name = self.fresh(hint)
        h = self.onnx.helper
        if value.dtype == dtypes.bfloat16:
            t = h.make_tensor(name, self.onnx.TensorProto.BFLOAT16, value.shape,
                              value.view(np.uint16).tobytes(), raw=True)
        else:
            t = self.onnx.numpy_helper.from_array(np.ascontiguousarray(value), name)
        self.inits.append(t)
        self.const[name] = value
        self.origin[name] = self.current
        return name

    def ints(self, values):
        return self.constant(np.asarray(values, np.int64), "i")

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), outs, **attrs))
        self.node_origin.append(self.current)
        return outs[0] if n_out == 1 else outs

    # -- shape helpers, folded when the value is a constant
    def transpose(self, x, perm):
        perm = list(perm)
        if perm == sorted(perm):
            return x
        if x in self.const:
            return self.constant(np.transpose(self.const[x], perm))
        return self.op("Transpose", [x], perm=perm)

    def reshape(self, x, shape, old_shape):
        if tuple(shape) == tuple(old_shape):
            return x
        if x in self.const:
            return self.constant(self.const[x].reshape(shape))
        return self.op("Reshape", [x, self.ints(shape)])

    def cast(self, x, from_dtype, to_dtype):
        if from_dtype == to_dtype:
            return x
        return self.op("Cast", [x], to=_elem_type(to_dtype))

    def scalar(self, value, dtype_name):
        return self.constant(np.asarray(value, dtypes.SUPPORTED[dtype_name]))

    def reduce(self, op_type, x, axes):
        if not axes:
            return self.op("Identity", [x])
        # ReduceSum takes axes as an input from opset 13, the others from opset 18.
        if op_type == "ReduceSum" and self.opset >= 13 or self.opset >= 18:
            return self.op(op_type, [x, self.ints(axes)], keepdims=0)
        return self.op(op_type, [x], axes=list(axes), keepdims=0)


# ---- primitive -> ONNX rules: rule(b, node, ins, in_avals, out_avals) -> output names ----
_RULES = {}


def _rule(*prims):
    def reg(f):
        for p in prims:
            _RULES[p] = f
        return f
    return reg


def _simple(prim, op_type):
    _RULES[prim] = lambda b, n, ins, ia, oa: b.op(op_type, ins)


for _p, _o in {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "max": "Max", "min": "Min",
               "neg": "Neg", "abs": "Abs", "sign": "Sign", "exp": "Exp", "log": "Log", "tanh": "Tanh",
               "logistic": "Sigmoid", "sqrt": "Sqrt", "erf": "Erf", "sin": "Sin", "cos": "Cos", "floor": "Floor",
               "ceil": "Ceil", "eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater",
               "ge": "GreaterOrEqual", "select": "Where", "stop_gradient": "Identity", "copy": "Identity"}.items():
    _simple(_p, _o)


@_rule("rsqrt")
def _rsqrt(b, n, ins, ia, oa):
    return b.op("Reciprocal", [b.op("Sqrt", ins)])


@_rule("log1p")
def _log1p(b, n, ins, ia, oa):
    return b.op("Log", [b.op("Add", [ins[0], b.scalar(1, ia[0][0])])])


@_rule("expm1")
def _expm1(b, n, ins, ia, oa):
    return b.op("Sub", [b.op("Exp", ins), b.scalar(1, ia[0][0])])


@_rule("ne")
def _ne(b, n, ins, ia, oa):
    return b.op("Not", [b.op("Equal", ins)])


@_rule("rem")
def _rem(b, n, ins, ia, oa):
    return b.op("Mod", ins, fmod=1 if dtypes.is_float(ia[0][0]) else 0)


@_rule("is_finite")
def _is_finite(b, n, ins, ia, oa):
    return b.op("Not", [b.op("Or", [b.op("IsNaN", ins), b.op("IsInf", ins)])])


@_rule("and", "or", "xor", "not")
def _logical(b, n, ins, ia, oa):
    if ia[0][0] != "bool":
        if b.opset < 18:
            raise UnsupportedPrimitiveError(f"ONNX export: bitwise {n.prim!r} on {ia[0][0]} needs opset >= 18 "
                                            f"(got {b.opset}) [at {n.where}]")
        return b.op("Bitwise" + n.prim.capitalize(), ins)
    return b.op(n.prim.capitalize(), ins)


@_rule("round")
def _round(b, n, ins, ia, oa):
    if n.attrs.get("rounding_method", 0) == 1:  # to nearest even, as ONNX Round
        return b.op("Round", ins)
    half = b.scalar(0.5, ia[0][0])
    return b.op("Mul", [b.op("Sign", ins), b.op("Floor", [b.op("Add", [b.op("Abs", ins), half])])])


@_rule("integer_pow")
def _integer_pow(b, n, ins, ia, oa):
    y = int(n.attrs["y"])
    if y == 0:
        return b.op("Expand", [b.scalar(1, ia[0][0]), b.ints(ia[0][1])])
    # Square-and-multiply, the order XLA (and podlet) use, so the rounding matches.
    x, acc, k = ins[0], None, abs(y)
    while k:
        if k & 1:
            acc = x if acc is None else b.op("Mul", [acc, x])
        k >>= 1
        if k:
            x = b.op("Mul", [x, x])
    return b.op("Reciprocal", [acc]) if y < 0 else acc


@_rule("clamp")
def _clamp(b, n, ins, ia, oa):
    lo, x, hi = ins
    return b.op("Min", [b.op("Max", [x, lo]), hi])


@_rule("convert_element_type")
def _convert(b, n, ins, ia, oa):
    return b.op("Cast", ins, to=_elem_type(oa[0][0]))


@_rule("reshape")
def _reshape(b, n, ins, ia, oa):
    return b.op("Reshape", [ins[0], b.ints(oa[0][1])])


@_rule("transpose")
def _transpose(b, n, ins, ia, oa):
    return b.op("Transpose", ins, perm=[int(p) for p in n.attrs["permutation"]])


@_rule("broadcast_in_dim")
def _broadcast(b, n, ins, ia, oa):
    shape, dims = list(oa[0][1]), list(n.attrs["broadcast_dimensions"])
    expanded = [1] * len(shape)
    for i, d in enumerate(dims):
        expanded[d] = ia[0][1][i]
    x = b.reshape(ins[0], expanded, ia[0][1])
    return x if expanded == shape else b.op("Expand", [x, b.ints(shape)])


@_rule("slice")
def _slice(b, n, ins, ia, oa):
    starts, limits = list(n.attrs["start_indices"]), list(n.attrs["limit_indices"])
    steps = list(n.attrs.get("strides") or [1] * len(starts))
    return b.op("Slice", [ins[0], b.ints(starts), b.ints(limits), b.ints(range(len(starts))), b.ints(steps)])


@_rule("rev")
def _rev(b, n, ins, ia, oa):
    axes = [int(d) for d in n.attrs["dimensions"]]
    if not axes:
        return b.op("Identity", ins)
    shape = ia[0][1]
    return b.op("Slice", [ins[0], b.ints([shape[a] - 1 for a in axes]), b.ints([-(2 ** 62)] * len(axes)),
                          b.ints(axes), b.ints([-1] * len(axes))])


def _dynamic_starts(b, idx_names, idx_avals, shape, sizes):
    """The (rank,) int64 start indices of a dynamic slice, clamped as jax clamps them:
    into [0, dim - size], so the window stays inside the operand."""
    starts = [b.op("Clip", [b.reshape(b.cast(i, a[0], "int64"), [1], ()), b.ints(0), b.ints(d - s)])
              for i, a, d, s in zip(idx_names, idx_avals, shape, sizes)]
    return starts[0] if len(starts) == 1 else b.op("Concat", starts, axis=0)


@_rule("dynamic_slice")
def _dynamic_slice(b, n, ins, ia, oa):
    shape, sizes = list(ia[0][1]), [int(s) for s in n.attrs["slice_sizes"]]
    starts = _dynamic_starts(b, ins[1:], ia[1:], shape, sizes)
    return b.op("Slice", [ins[0], starts, b.op("Add", [starts, b.ints(sizes)]), b.ints(range(len(shape)))])


@_rule("dynamic_update_slice")
def _dynamic_update_slice(b, n, ins, ia, oa):
    # The update padded to the operand's shape at the clamped starts, chosen where a
    # padded mask of ones is set.
    shape, sizes = list(ia[0][1]), list(ia[1][1])
    starts = _dynamic_starts(b, ins[2:], ia[2:], shape, sizes)
    ends = b.op("Sub", [b.ints([d - s for d, s in zip(shape, sizes)]), starts])
    pads = b.op("Concat", [starts, ends], axis=0)
    upd = b.op("Pad", [ins[1], pads], mode="constant")
    ones = b.op("Expand", [b.scalar(1, "float32"), b.ints(sizes)])
    inside = b.op("Cast", [b.op("Pad", [ones, pads], mode="constant")], to=_elem_type("bool"))
    return b.op("Where", [inside, upd, ins[0]])


@_rule("concatenate")
def _concat(b, n, ins, ia, oa):
    return b.op("Concat", ins, axis=int(n.attrs["dimension"]))


@_rule("pad")
def _pad(b, n, ins, ia, oa):
    rank = len(ia[0][1])
    lo = list(n.attrs.get("low", [0] * rank))
    hi = list(n.attrs.get("high", [0] * rank))
    interior = list(n.attrs.get("interior") or [0] * rank)
    if any(interior):
        raise UnsupportedPrimitiveError(f"ONNX export: 'pad' with interior padding {interior} has no ONNX "
                                        f"mapping [at {n.where}]")
    x = ins[0]
    if any(p < 0 for p in lo + hi):  # negative padding crops
        shape = ia[0][1]
        x = b.op("Slice", [x, b.ints([max(-p, 0) for p in lo]), b.ints([s - max(-p, 0) for s, p in zip(shape, hi)]),
                           b.ints(range(rank))])
    pads = [max(p, 0) for p in lo] + [max(p, 0) for p in hi]
    if not any(pads):
        return b.op("Identity", [x])
    return b.op("Pad", [x, b.ints(pads), ins[1]], mode="constant")


_REDUCE = {"reduce_sum": "ReduceSum", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin",
           "reduce_prod": "ReduceProd"}


@_rule(*_REDUCE)
def _reduce(b, n, ins, ia, oa):
    return b.reduce(_REDUCE[n.prim], ins[0], [int(a) for a in n.attrs["axes"]])


@_rule("argmax", "argmin")
def _arg(b, n, ins, ia, oa):
    axis = int(n.attrs["axis"]) % len(ia[0][1])
    idx = b.op("ArgMax" if n.prim == "argmax" else "ArgMin", ins, axis=axis, keepdims=0)
    return b.cast(idx, "int64", oa[0][0])


@_rule("cumsum")
def _cumsum(b, n, ins, ia, oa):
    axis = int(n.attrs["axis"]) % len(ia[0][1])
    return b.op("CumSum", [ins[0], b.ints(axis)], reverse=int(bool(n.attrs.get("reverse", 0))))


def _clamped_index(b, idx, idx_dtype, size):
    # podlet (like jax) clamps out-of-range indices; ONNX would wrap negatives.
    i64 = b.cast(idx, idx_dtype, "int64")
    return b.op("Clip", [i64, b.ints(0), b.ints(max(size - 1, 0))])


@_rule("take")
def _take(b, n, ins, ia, oa):
    axis = int(n.attrs["axis"]) % len(ia[0][1])
    return b.op("Gather", [ins[0], _clamped_index(b, ins[1], ia[1][0], ia[0][1][axis])], axis=axis)


@_rule("take_along_axis")
def _take_along(b, n, ins, ia, oa):
    axis = int(n.attrs["axis"]) % len(ia[0][1])
    return b.op("GatherElements", [ins[0], _clamped_index(b, ins[1], ia[1][0], ia[0][1][axis])], axis=axis)


# ---- a TPU's bf16 algorithms (the `algorithm` attr, cpp/podlet/prims/dot_algorithm.h): the
# f32 operands' bf16 parts as Cast pairs, one product per pair of parts, combined in XLA's order
_ALG_PARTS = {"bf16": 1, "bf16_3x": 2, "bf16_6x": 3}
_ALG_SMALL = {1: [], 2: [(1, 0), (0, 1)], 3: [(1, 1), (0, 2), (2, 0), (0, 1), (1, 0)]}


def _algorithm_parts(n, ia, oa):
    """The number of bf16 parts per operand of the node's algorithm; 0 where it changes
    nothing (none, f64, both operands already bf16)."""
    alg = n.attrs.get("algorithm", "")
    if not alg:
        return 0
    if alg not in _ALG_PARTS:
        raise UnsupportedPrimitiveError(f"ONNX export: '{n.prim}' with algorithm {alg!r} (expected one of "
                                        f"{sorted(_ALG_PARTS)}) [at {n.where}]")
    (ld, _), (rd, _) = ia[0], ia[1]
    narrow = ("float32", "bfloat16")
    if ld not in narrow or rd not in narrow or oa[0][0] == "float64" or ld == rd == "bfloat16":
        return 0
    return _ALG_PARTS[alg]


def _bf16_parts(b, x, dtype, k):
    """x's k bf16 parts as float32 values: hi = bf16(x), then bf16 of each remainder."""
    rest, parts = b.cast(x, dtype, "float32"), []
    for i in range(k):
        parts.append(b.cast(b.cast(rest, "float32", "bfloat16"), "bfloat16", "float32"))
        if i + 1 < k:
            rest = b.op("Sub", [rest, parts[-1]])
    return parts


def _bf16_passes(b, k, lhs, ld, rhs, rd, product):
    """product(lhs, rhs) in the algorithm of k parts: float32 result."""
    pa, pb = _bf16_parts(b, lhs, ld, k), _bf16_parts(b, rhs, rd, k)
    small = _ALG_SMALL[k]
    if not small:
        return product(pa[0], pb[0])
    acc = product(pa[small[0][0]], pb[small[0][1]])
    for i, j in small[1:]:
        acc = b.op("Add", [acc, product(pa[i], pb[j])])
    acc = b.op("Where", [b.op("IsNaN", [acc]), b.scalar(0.0, "float32"), acc])  # as XLA: a NaN of the small terms is 0
    return b.op("Add", [acc, product(pa[0], pb[0])])


@_rule("dot_general")
def _dot_general(b, n, ins, ia, oa):
    (ld, ls), (rd, rs) = ia
    lc, rc = [int(i) for i in n.attrs["lhs_contracting"]], [int(i) for i in n.attrs["rhs_contracting"]]
    lb, rb = [int(i) for i in n.attrs.get("lhs_batch", [])], [int(i) for i in n.attrs.get("rhs_batch", [])]
    lf = [i for i in range(len(ls)) if i not in lc and i not in lb]
    rf = [i for i in range(len(rs)) if i not in rc and i not in rb]
    k = int(np.prod([ls[i] for i in lc], dtype=np.int64))
    fl = [ls[i] for i in lf]
    fr = int(np.prod([rs[i] for i in rf], dtype=np.int64))
    batch = [ls[i] for i in lb]
    lhs = b.transpose(ins[0], lb + lf + lc)
    rhs = b.transpose(ins[1], rb + rc + rf)
    if batch:  # (B..., Fl, K) @ (B..., K, Fr)
        l_shape = batch + [int(np.prod(fl, dtype=np.int64)), k]
        lhs = b.reshape(lhs, l_shape, batch + fl + [ls[i] for i in lc])
    else:      # (Fl..., K) @ (K, Fr): MatMul broadcasts over the free lhs dims
        lhs = b.reshape(lhs, fl + [k], fl + [ls[i] for i in lc])
    rhs = b.reshape(rhs, batch + [k, fr], batch + [rs[i] for i in rc] + [rs[i] for i in rf])
    k = _algorithm_parts(n, ia, oa)
    if k:
        y, yd = _bf16_passes(b, k, lhs, ld, rhs, rd, lambda u, v: b.op("MatMul", [u, v])), "float32"
    else:
        y, yd = b.op("MatMul", [lhs, rhs]), ld
    y_shape = (batch + [int(np.prod(fl, dtype=np.int64)), fr]) if batch else fl + [fr]
    y = b.reshape(y, oa[0][1], y_shape)
    return b.cast(y, yd, oa[0][0])


@_rule("dot_product_attention")
def _attention(b, n, ins, ia, oa):
    """The fused attention node as ONNX's plain ops: MatMuls in f32, Where for the
    combined mask (jax's large negative), Softmax over the keys; lse from ReduceLogSumExp."""
    a = n.attrs
    (qd, qs), (_, ks) = ia[0], ia[1]
    B, T, N, H = qs
    S, K = ks[1], ks[2]
    G = N // K
    f32 = "float32" if qd != "float64" else "float64"
    pos = 3
    opt = {}
    for flag, name in (("has_bias", "bias"), ("has_mask", "mask"), ("has_qlen", "qlen"), ("has_kvlen", "kvlen")):
        if int(a.get(flag, 0)):
            opt[name] = (ins[pos], ia[pos])
            pos += 1
    q = b.cast(b.transpose(ins[0], [0, 2, 1, 3]), qd, f32)            # B N T H
    k = b.cast(b.transpose(ins[1], [0, 2, 3, 1]), qd, f32)            # B K H S
    v = b.cast(b.transpose(ins[2], [0, 2, 1, 3]), qd, f32)            # B K S H
    if G > 1:  # query head n reads kv head n // G
        idx = b.ints(np.arange(N) // G)
        k, v = b.op("Gather", [k, idx], axis=1), b.op("Gather", [v, idx], axis=1)
    logits = b.op("Mul", [b.op("MatMul", [q, k]), b.scalar(float(a["scale"]), f32)])  # B N T S
    if "bias" in opt:
        name, (bd, _) = opt["bias"]
        logits = b.op("Add", [logits, b.cast(name, bd, f32)])
    allowed = np.ones((T, S), bool)  # the static masks, folded to a constant
    t, s_ = np.arange(T)[:, None], np.arange(S)[None, :]
    if int(a.get("causal", 0)):
        allowed &= s_ <= t
    if int(a.get("window_left", -1)) >= 0:
        allowed &= s_ >= t - int(a["window_left"])
    if int(a.get("window_right", -1)) >= 0:
        allowed &= s_ <= t + int(a["window_right"])
    keep = None if allowed.all() else b.constant(allowed[None, None])
    if "mask" in opt:
        keep = opt["mask"][0] if keep is None else b.op("And", [keep, opt["mask"][0]])
    lengths = {}
    for name, axis, size in (("qlen", 2, T), ("kvlen", 3, S)):
        if name in opt:
            shape = [B, 1, 1, 1]
            ar = b.constant(np.arange(size, dtype=np.int32).reshape([1, 1, size, 1] if axis == 2 else [1, 1, 1, size]))
            lengths[name] = b.op("Less", [ar, b.reshape(opt[name][0], shape, [B])])
            keep = lengths[name] if keep is None else b.op("And", [keep, lengths[name]])
    if keep is not None:
        logits = b.op("Where", [keep, logits, b.scalar(-0.7 * np.finfo(np.float32).max, f32)])
    probs = b.op("Softmax", [logits], axis=-1)
    out = b.op("MatMul", [probs, v])                                   # B N T H
    if "qlen" in lengths:
        out = b.op("Mul", [out, b.cast(lengths["qlen"], "bool", f32)])
    out = b.cast(b.transpose(out, [0, 2, 1, 3]), f32, oa[0][0])
    lse = b.reduce("ReduceLogSumExp", logits, [3])
    return [out, b.cast(lse, f32, oa[1][0])]


@_rule("layer_norm")
def _layer_norm(b, n, ins, ia, oa):
    """Flax's LayerNorm (use_mean 1) as ONNX's LayerNormalization (opset >= 17, float32
    statistics); RMSNorm, and LayerNorm below opset 17, as ReduceMean / Sqrt / Div with
    Flax's var = max(0, E[x^2] - E[x]^2). mean and rstd come out as the primitive's."""
    a = n.attrs
    xd, xs = ia[0]
    k, eps, use_mean = int(a.get("feature_ndim", 1)), float(a["epsilon"]), bool(int(a.get("use_mean", 1)))
    acc = oa[1][0]
    R = len(xs)
    lead, kept = list(xs[:R - k]), list(xs[:R - k]) + [1] * k
    axes = list(range(R - k, R))
    pos = 1
    scale = bias = None
    if int(a.get("has_scale", 0)):
        scale, pos = ins[pos], pos + 1
    if int(a.get("has_bias", 0)):
        bias = ins[pos]
    x = b.cast(ins[0], xd, acc)
    if use_mean and b.opset >= 17:
        if scale is None:
            scale = b.constant(np.ones(xs[R - k:], dtypes.SUPPORTED[acc]))
        y, mean, rstd = b.op("LayerNormalization", [x, scale] + ([bias] if bias is not None else []), n_out=3,
                             axis=R - k, epsilon=eps, stash_type=1)
    else:
        def mean_of(v):
            return b.reshape(b.reduce("ReduceMean", v, axes), kept, lead)
        m2 = mean_of(b.op("Mul", [x, x]))
        if use_mean:
            mean = mean_of(x)
            var = b.op("Max", [b.op("Sub", [m2, b.op("Mul", [mean, mean])]), b.scalar(0.0, acc)])
            xc = b.op("Sub", [x, mean])
        else:
            mean, var, xc = b.op("Mul", [m2, b.scalar(0.0, acc)]), m2, x
        rstd = b.op("Div", [b.scalar(1.0, acc), b.op("Sqrt", [b.op("Add", [var, b.scalar(eps, acc)])])])
        y = b.op("Mul", [xc, rstd if scale is None else b.op("Mul", [rstd, scale])])
        if bias is not None:
            y = b.op("Add", [y, bias])
    return [b.cast(y, acc, oa[0][0]), b.reshape(mean, lead, kept), b.reshape(rstd, lead, kept)]


@_rule("softmax", "log_softmax")
def _softmax(b, n, ins, ia, oa):
    """jax.nn.softmax / log_softmax over the last axis, computed in float32 for bfloat16
    as the fused kernel does."""
    xd = ia[0][0]
    acc = "float64" if xd == "float64" else "float32"
    y = b.op("Softmax" if n.prim == "softmax" else "LogSoftmax", [b.cast(ins[0], xd, acc)], axis=-1)
    return b.cast(y, acc, oa[0][0])


@_rule("conv_general_dilated")
def _conv(b, n, ins, ia, oa):
    (xd, xs), (wd, ws) = ia
    if any(d != 1 for d in n.attrs.get("lhs_dilation", [1, 1])):
        raise UnsupportedPrimitiveError(f"ONNX export: 'conv_general_dilated' with lhs_dilation "
                                        f"{list(n.attrs['lhs_dilation'])} (a transposed convolution) is not "
                                        f"supported [at {n.where}]")
    pad = [int(p) for p in n.attrs["padding"]]  # (lo, hi) per spatial dim
    if any(p < 0 for p in pad):
        raise UnsupportedPrimitiveError(f"ONNX export: negative convolution padding {pad} [at {n.where}]")
    x = b.transpose(ins[0], [0, 3, 1, 2])        # NHWC -> NCHW
    w = b.transpose(ins[1], [3, 2, 0, 1])        # HWIO -> OIHW

    def conv(u, v):
        return b.op("Conv", [u, v], kernel_shape=[int(ws[0]), int(ws[1])],
                    strides=[int(s) for s in n.attrs["window_strides"]],
                    dilations=[int(d) for d in n.attrs.get("rhs_dilation", [1, 1])],
                    pads=[pad[0], pad[2], pad[1], pad[3]], group=int(n.attrs.get("feature_group_count", 1)))
    k = _algorithm_parts(n, ia, oa)
    y, yd = (_bf16_passes(b, k, x, xd, w, wd, conv), "float32") if k else (conv(x, w), xd)
    y = b.transpose(y, [0, 2, 3, 1])
    return b.cast(y, yd, oa[0][0])


@_rule("reduce_window")
def _reduce_window(b, n, ins, ia, oa):
    shape = list(ia[0][1])
    win = [int(d) for d in n.attrs["window_dimensions"]]
    strides = [int(s) for s in n.attrs["window_strides"]]
    pad = [int(p) for p in n.attrs["padding"]]
    lo, hi = pad[0::2], pad[1::2]
    if any(p < 0 for p in pad):
        raise UnsupportedPrimitiveError(f"ONNX export: negative reduce_window padding {pad} [at {n.where}]")
    spatial = [d for d in range(len(shape)) if win[d] != 1 or strides[d] != 1 or lo[d] or hi[d]]
    rest = [d for d in range(len(shape)) if d not in spatial]
    if not spatial:
        return b.op("Identity", ins)
    # ONNX pools want (N, C, spatial...): move the pooled dims last, fold the rest into C.
    perm = rest + spatial
    x = b.transpose(ins[0], perm)
    folded = [1, int(np.prod([shape[d] for d in rest], dtype=np.int64))] + [shape[d] for d in spatial]
    x = b.reshape(x, folded, [shape[d] for d in perm])
    attrs = dict(kernel_shape=[win[d] for d in spatial], strides=[strides[d] for d in spatial],
                 pads=[lo[d] for d in spatial] + [hi[d] for d in spatial])
    if n.attrs["computation"] == "max":
        y = b.op("MaxPool", [x], **attrs)
    else:  # a windowed sum = the zero-padded average times the window size
        y = b.op("AveragePool", [x], count_include_pad=1, **attrs)
        y = b.op("Mul", [y, b.scalar(int(np.prod(attrs["kernel_shape"])), ia[0][0])])
    out_shape = list(oa[0][1])
    y = b.reshape(y, [out_shape[d] for d in perm], [1, folded[1]] + [out_shape[d] for d in spatial])
    return b.transpose(y, [perm.index(d) for d in range(len(shape))])


SUPPORTED_PRIMITIVES = frozenset(_RULES)


def _eval_kwargs(model):
    """The keyword that puts a module in eval mode, read from its ``__call__`` signature."""
    try:
        params = inspect.signature(type(model).__call__).parameters
    except (TypeError, ValueError):
        return {}
    for name, value in (("train", False), ("training", False), ("deterministic", True), ("is_training", False)):
        if name in params:
            return {name: value}
    return {}


def _inference_fn(model, variables, apply_kwargs, dtype):
    from ..nn import Module
    if isinstance(model, Module):
        if dtype is not None and "dtype" in getattr(model, "__dataclass_fields__", {}):
            model = model.clone(dtype=dtypes.dtype(dtype))
        kw = _eval_kwargs(model) if apply_kwargs is None else dict(apply_kwargs)
        return lambda x: model.apply(variables, x, **kw)
    if not callable(model):
        raise TypeError(f"to_onnx: model must be a podlet.nn.Module or a callable, got {type(model).__name__}")
    if variables is None:
        return lambda x: model(x, **(apply_kwargs or {}))
    return lambda x: model(variables, x, **(apply_kwargs or {}))


def build_model(rec, opset=DEFAULT_OPSET, input_names=None, output_names=None, graph_name="podlet"):
    """The ONNX ModelProto of a recording (see ``_record.record``)."""
    return _build(rec, opset, input_names, output_names, graph_name)[0]


def _build(rec, opset, input_names, output_names, graph_name):
    """The ModelProto and its _Builder (which podlet node each initializer and ONNX node
    came from: what a dynamic-batch error names)."""
    onnx = _onnx()
    h = onnx.helper
    b = _Builder(rec, opset)
    input_names = input_names or (["input"] if len(rec.inputs) == 1 else [f"input_{i}" for i in range(len(rec.inputs))])
    output_names = output_names or (["output"] if len(rec.outputs) == 1
                                    else [f"output_{i}" for i in range(len(rec.outputs))])
    for vid, name in zip(rec.inputs, input_names):
        b.names[vid] = name
    first_use = {}
    for n in rec.nodes:
        for v in n.inputs:
            first_use.setdefault(v, n)
    for vid, value in rec.consts.items():
        b.current = first_use.get(vid)
        b.names[vid] = b.constant(value, "w")
    for n in rec.nodes:
        b.current = n
        rule = _RULES.get(n.prim)
        if rule is None:
            raise UnsupportedPrimitiveError(
                f"ONNX export: primitive {n.prim!r} has no ONNX mapping [at {n.where}]; supported primitives: "
                f"{', '.join(sorted(_RULES))}")
        ins = [b.names[v] for v in n.inputs]
        outs = rule(b, n, ins, [rec.avals[v] for v in n.inputs], [rec.avals[v] for v in n.outputs])
        outs = [outs] if isinstance(outs, str) else list(outs)
        for v, name in zip(n.outputs, outs):
            b.names[v] = name
    b.current = None
    for vid, name in zip(rec.outputs, output_names):
        b.nodes.append(h.make_node("Identity", [b.names[vid]], [name]))
        b.node_origin.append(None)

    def info(name, vid):
        d, s = rec.avals[vid]
        return h.make_tensor_value_info(name, _elem_type(d), list(s))
    # Weights folded into a transposed copy (conv kernels to OIHW) leave the original unused.
    used = {i for nd in b.nodes for i in nd.input}
    inits = [t for t in b.inits if t.name in used]
    graph = h.make_graph(b.nodes, graph_name, [info(nm, v) for v, nm in zip(rec.inputs, input_names)],
                         [info(nm, v) for v, nm in zip(rec.outputs, output_names)], initializer=inits)
    opsets = [h.make_opsetid("", opset)]
    # The oldest IR version that knows the opset, so older runtimes load the file.
    return h.make_model(graph, opset_imports=opsets, producer_name="podlet",
                        ir_version=h.find_min_ir_version_for(opsets)), b


def _output_names(rec, output_name):
    if len(rec.outputs) != 1:
        return [f"{output_name}_{i}" for i in range(len(rec.outputs))]
    return [output_name]


def _dynamic_model(fn, sample_input, opset, input_name, output_name, graph_name):
    """The graph traced at _dynamic.TRACE_BATCHES, its batch left to run time."""
    from .. import tree_util
    from .._src.core import ShapeDtypeStruct
    leaves, tree = tree_util.tree_flatten(sample_input)
    shapes = [tuple(x.shape) if hasattr(x, "shape") else np.shape(x) for x in leaves]
    for s in shapes:
        if not s:
            raise PodletError(f"to_onnx(dynamic_batch=True): the sample input's leading axis is the batch, "
                              f"but an input is a scalar (shape {s}); pass dynamic_batch=False")
    models, builders = [], []
    for batch in _dynamic.TRACE_BATCHES:
        sample = tree_util.tree_unflatten(
            tree, [ShapeDtypeStruct((batch,) + s[1:], x.dtype) for x, s in zip(leaves, shapes)])
        try:
            rec = _record.record(fn, sample)
        except (PodletError, ValueError, TypeError, IndexError) as e:
            _record.record(fn, sample_input)    # an error at the sample's own shape is not the batch's
            raise _dynamic.DynamicBatchError(
                f"to_onnx(dynamic_batch=True) traces the model at batch sizes {list(_dynamic.TRACE_BATCHES)}; "
                f"at batch {batch} it failed ({type(e).__name__}: {e}); a model that runs at one batch size "
                f"only is exported with dynamic_batch=False") from e
        input_names = [input_name] if len(rec.inputs) == 1 else [f"{input_name}_{i}" for i in range(len(rec.inputs))]
        proto, b = _build(rec, opset, input_names, _output_names(rec, output_name), graph_name)
        models.append(proto)
        builders.append(b)
    return _dynamic.make_batch_dynamic(models, builders, _dynamic.TRACE_BATCHES, input_names)


def to_onnx(model, variables, sample_input, path, opset=DEFAULT_OPSET, apply_kwargs=None,
            input_name="input", output_name="output", dtype="float32", dynamic_batch=False):
    """Writes the eval-mode inference graph of `model` to `path` as ONNX; returns the
    ModelProto (already checked with ``onnx.checker.check_model``).

    Args:
      model: a ``podlet.nn.Module`` (called as ``model.apply(variables, x, train=False)``,
        or ``deterministic=True``, whichever its ``__call__`` takes), or a callable
        ``f(variables, x)`` (``f(x)`` when `variables` is None).
      variables: the variables (``{'params': ..., 'batch_stats': ...}``).
      sample_input: an array or ``ShapeDtypeStruct`` giving the input shape and dtype
        the graph is exported for.
      path: the .onnx file, written to a temporary file and renamed.
      opset: the ONNX opset, 13 or newer (default 17).
      apply_kwargs: keyword arguments for the call, replacing the eval-mode guess.
      dtype: compute dtype of the exported graph, set on a Module that has a ``dtype``
        attribute (podlet.models, Flax-style layers). Default float32: a model trained
        in bfloat16 is exported in float32, since ONNX's Conv and most runtimes have no
        bfloat16 kernels. None keeps the model's own.
      dynamic_batch: if True, the leading axis of the input and of every output that has
        it is symbolic (``dim_param "batch"``, as torch.onnx's ``dynamic_axes`` give),
        and every shape in the graph that depends on it (Reshape targets, Expand and
        Tile shapes, Slice ends, constants broadcast over the batch) is computed from
        the input's shape at run time. The model is traced at batch sizes 2, 3 and 101
        (the sample's own batch size is not used) and the three graphs must differ
        only in such values, each ``a * batch + c`` (a slice of the batch axis ending
        beyond 101 rows would be read as the whole batch: the one case not caught).
        Default False, as in torch.onnx.export: the graph has the sample's shape, which
        also suits a function whose code fixes its batch size (it cannot be traced at
        another); ``podlet export`` (a podlet.models network) turns it on by default.

    Raises UnsupportedPrimitiveError naming the first primitive that has no mapping, and
    DynamicBatchError (a PodletError) naming the primitive whose graph cannot take its
    batch size at run time (a mean over the batch axis, a size quadratic in the batch,
    code that fixes the batch size).
    """
    onnx = _onnx()
    if not 13 <= int(opset) <= onnx.defs.onnx_opset_version():
        raise PodletError(f"to_onnx: opset {opset} is not supported; expected 13..{onnx.defs.onnx_opset_version()}")
    fn = _inference_fn(model, variables, apply_kwargs, dtype)
    if dynamic_batch:
        proto = _dynamic_model(fn, sample_input, opset, input_name, output_name, type(model).__name__)
    else:
        rec = _record.record(fn, sample_input)
        proto = build_model(rec, opset, [input_name], _output_names(rec, output_name),
                            graph_name=type(model).__name__)
    onnx.checker.check_model(proto, full_check=True)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".onnx", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(proto.SerializeToString())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return proto
