"""lax.Precision, lax.DotAlgorithm, lax.DotAlgorithmPreset (and lax.AccuracyMode /
lax.Tolerance): jax's per-call precision of matmuls and convolutions, and what each
means in podlet.

podlet's default is jax's CPU backend: matmuls and convolutions multiply exactly and sum
in float32. On request it gives a TPU's numerics instead:

* The strings 'bfloat16' and 'bfloat16_3x' (per op ``precision=``, or the default set
  with ``podlet.default_matmul_precision(...)`` / ``config.update(
  "jax_default_matmul_precision", ...)``), and the presets BF16_BF16_F32, BF16_BF16_F32_X3
  and BF16_BF16_F32_X6, in dot_general (so jnp.dot / matmul / einsum / nn.Dense ...) and in
  the convolutions (conv_general_dilated, conv_transpose, nn.Conv ...):

  - 'bfloat16' / BF16_BF16_F32: each float32 operand is rounded to bfloat16 (round to
    nearest even), the products are exact and summed in float32: one pass, a TPU's
    DEFAULT.
  - 'bfloat16_3x' / BF16_BF16_F32_X3: each float32 operand x splits into hi = bf16(x) and
    lo = bf16(x - hi); the result is (dot(lo_a, hi_b) + dot(hi_a, lo_b)) + dot(hi_a,
    hi_b), each dot summed in float32, in the order of XLA's DotAlgorithmRewriter (a NaN
    of the small terms alone counts as 0): three passes, a TPU's HIGH, about 2^-17
    relative error per operand instead of 2^-9.
  - BF16_BF16_F32_X6: hi, mid, lo (three bf16 parts of each operand), six products in
    XLA's order: about float32's own accuracy.

  The algorithm is an attribute of the primitives (``algorithm``: 'bf16' / 'bf16_3x' /
  'bf16_6x', prims/dot_algorithm.h) and the C++ kernels run it: the operands are rounded
  into bf16 buffers and each pass is the usual bf16 kernel with a float32 result (the
  bf16 GEMM on AVX512_BF16 or AMX hosts; the direct convolution kernels, never
  Winograd). Gradients use the same algorithm (the transposed dots and convolutions carry
  it, as jax's transpose rules carry precision), and so do vmap, the sharded jit and
  pmap. jit retraces when the default changes. bfloat16 operands are already bfloat16 and
  are unaffected; float64 operands (or a float64 result) stay exact, summed in float64.
  A pair (lhs, rhs) of strings takes the more precise of the two ('bfloat16' with
  'highest' is exact).

  This deviates from jax on a CPU, which ignores all of these (its f32 matmuls stay
  exact), on purpose: a TPU user's 'bfloat16' asks for the TPU's numerics, and gets them
  on a CPU (to reproduce a TPU run, or to see how a model trains under them). jax's
  'fastest' is not a TPU precision here, and the fused attention of jax.nn's form
  (``nn.dot_product_attention`` with jax.nn's keywords) keeps exact float32 products;
  Flax's form runs op by op under a bf16 default, so its einsums take it.

* Everything else leaves float32 products exact, as on jax's CPU: the strings 'default',
  'fastest', 'high', 'tensorfloat32', 'highest', 'float32', None (with no default set),
  and every lax.Precision value, DEFAULT included (a TPU rounds there; podlet keeps jax's
  CPU meaning, so existing code does not change numerics; ``lax.Precision('bfloat16')``
  is Precision.DEFAULT, as in jax, and exact). The one effect of a Precision is on bf16
  convolutions: DEFAULT lets a 3x3 stride-1 layer take Winograd F(2x2, 3x3) (about 2.5x
  the rounding error of the direct kernel, see kernels/conv_winograd.h), HIGH and HIGHEST
  keep the direct kernel (exact products), also in the convolutions of the gradient.
* The other DotAlgorithmPresets (or their names) in dot_general, dot and jnp.dot /
  matmul / einsum / ...: as jax's CPU lowering, the operands are cast to the preset's
  input type unless theirs is one it supports (BF16_BF16_F32 keeps f32 and bf16 operands;
  F32_F32_F32, BF16_BF16_F32_X3 / _X6 cast to f32 first; F64_F64_F64 computes in f64 even
  without x64, then rounds to the output type; F16_F16_F16 rounds the operands and the
  result to float16 values, which podlet, having no float16 dtype, holds in float32), the
  product accumulates in the preset's type, and the result has dot_general's usual
  dtype. The presets jax's CPU refuses (the F8 ones, F16_F16_F32, BF16_BF16_BF16,
  BF16_BF16_F32_X9, TF32_TF32_F32(_X3)) raise ValueError("The precision '<name>' is not
  supported by dot_general on CPU"), jax's message; so does every DotAlgorithm (jax's CPU
  accepts only those presets).
* In a convolution jax's CPU ignores the algorithm; podlet runs the three bf16 presets
  above (without casts) and ignores the others (a preset other than DEFAULT keeps the
  direct kernel of bf16 convolutions, like HIGHEST).
* None means ``podlet.config.default_matmul_precision`` (jax's values, and
  'bfloat16_3x'), else the default.

AccuracyMode and Tolerance are jax's ``accuracy=`` of the unary functions (exp, log,
tanh, ...): accepted and checked; podlet's kernels have one accuracy.
"""
import enum
from typing import NamedTuple

import numpy as np


class Precision(enum.Enum):
    """jax.lax.Precision: DEFAULT ('bfloat16', 'default', 'fastest'), HIGH ('tensorfloat32',
    'high', 'bfloat16_3x'), HIGHEST ('float32', 'highest'). Every value keeps f32 products
    exact (jax's CPU); the strings 'bfloat16' / 'bfloat16_3x' themselves, given as
    ``precision=``, select a TPU's bf16 algorithms (module docstring)."""
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        return _STRINGS.get(value) if value is None or isinstance(value, str) else None

    def __str__(self):
        return self.name


_STRINGS = {"bfloat16": Precision.DEFAULT, "default": Precision.DEFAULT, "fastest": Precision.DEFAULT,
            None: Precision.DEFAULT,
            "tensorfloat32": Precision.HIGH, "high": Precision.HIGH, "bfloat16_3x": Precision.HIGH,
            "float32": Precision.HIGHEST, "highest": Precision.HIGHEST}


class DotAlgorithm(NamedTuple):
    """jax.lax.DotAlgorithm: lhs / rhs precision types, accumulation type and the
    component counts of an accelerator's dot algorithm. Accepted and checked by
    canonicalize_precision; dot_general refuses it as jax's CPU does (ValueError), and a
    convolution ignores it, as jax's CPU does."""
    lhs_precision_type: object
    rhs_precision_type: object
    accumulation_type: object
    lhs_component_count: int = 1
    rhs_component_count: int = 1
    num_primitive_operations: int = 1
    allow_imprecise_accumulation: bool = False


def _bf16():
    from . import dtypes
    return dtypes.bfloat16


class DotAlgorithmPreset(enum.Enum):
    """jax.lax.DotAlgorithmPreset: named dot algorithms, ``LHS_RHS_ACCUM`` (see the module
    docstring for what each does in podlet)."""
    DEFAULT = enum.auto()
    ANY_F8_ANY_F8_F32 = enum.auto()
    ANY_F8_ANY_F8_F32_FAST_ACCUM = enum.auto()
    ANY_F8_ANY_F8_ANY = enum.auto()
    ANY_F8_ANY_F8_ANY_FAST_ACCUM = enum.auto()
    F16_F16_F16 = enum.auto()
    F16_F16_F32 = enum.auto()
    BF16_BF16_BF16 = enum.auto()
    BF16_BF16_F32 = enum.auto()
    BF16_BF16_F32_X3 = enum.auto()
    BF16_BF16_F32_X6 = enum.auto()
    BF16_BF16_F32_X9 = enum.auto()
    TF32_TF32_F32 = enum.auto()
    TF32_TF32_F32_X3 = enum.auto()
    F32_F32_F32 = enum.auto()
    F64_F64_F64 = enum.auto()

    def __repr__(self):
        return f"{self.__class__.__name__}.{self.name}"

    def __str__(self):
        return self.name

    @property
    def supported_lhs_types(self):
        P = DotAlgorithmPreset
        if self in (P.DEFAULT, P.ANY_F8_ANY_F8_F32, P.ANY_F8_ANY_F8_F32_FAST_ACCUM, P.ANY_F8_ANY_F8_ANY,
                    P.ANY_F8_ANY_F8_ANY_FAST_ACCUM):
            return None
        if self in (P.F16_F16_F16, P.F16_F16_F32):
            return (np.float16,)
        if self in (P.BF16_BF16_BF16, P.BF16_BF16_F32):
            return (_bf16(), np.float32)
        if self is P.F64_F64_F64:
            return (np.float64,)
        return (np.float32,)

    @property
    def supported_rhs_types(self):
        return self.supported_lhs_types

    @property
    def accumulation_type(self):
        P = DotAlgorithmPreset
        if self in (P.DEFAULT, P.ANY_F8_ANY_F8_ANY, P.ANY_F8_ANY_F8_ANY_FAST_ACCUM):
            return None
        return {P.F16_F16_F16: np.float16, P.BF16_BF16_BF16: _bf16(), P.F64_F64_F64: np.float64}.get(self, np.float32)

    def supported_output_types(self, lhs_dtype, rhs_dtype):
        P = DotAlgorithmPreset
        if self in (P.ANY_F8_ANY_F8_F32, P.ANY_F8_ANY_F8_F32_FAST_ACCUM):
            return (np.float32, np.float16, _bf16())
        if self is P.F16_F16_F32:
            return (np.float32, np.float16) if np.promote_types(lhs_dtype, rhs_dtype) == np.float16 else (np.float32,)
        if self is P.BF16_BF16_F32:
            both_bf16 = np.dtype(lhs_dtype) == np.dtype(_bf16()) and np.dtype(rhs_dtype) == np.dtype(_bf16())
            return (np.float32, _bf16()) if both_bf16 else (np.float32,)
        acc = self.accumulation_type
        return None if acc is None else (acc,)


# The presets jax 0.10.2's CPU lowering accepts (_handle_dot_precision in jax/_src/lax/lax.py).
_CPU_PRESETS = {DotAlgorithmPreset.DEFAULT, DotAlgorithmPreset.F16_F16_F16, DotAlgorithmPreset.F32_F32_F32,
                DotAlgorithmPreset.F64_F64_F64, DotAlgorithmPreset.BF16_BF16_F32,
                DotAlgorithmPreset.BF16_BF16_F32_X3, DotAlgorithmPreset.BF16_BF16_F32_X6}


class AccuracyMode(enum.Enum):
    """jax.lax.AccuracyMode: the ``accuracy=`` of unary functions (accepted; podlet's
    kernels have one accuracy)."""
    HIGHEST = 1
    DEFAULT = 2


class Tolerance:
    """jax.lax.Tolerance(atol, rtol, ulps): a requested accuracy of a unary function
    (checked as jax does; podlet's kernels have one accuracy)."""

    def __init__(self, atol: float = 0.0, rtol: float = 0.0, ulps: int = 0):
        if atol < 0.0 or rtol < 0.0 or ulps < 0.0:
            raise ValueError(f"Tolerances must be non-negative, got atol={atol}, rtol={rtol}, ulps={ulps}.")
        if atol == 0.0 and rtol == 0.0 and ulps == 0:
            raise ValueError("At least one of atol, rtol, or ulps must be set.")
        self.atol, self.rtol, self.ulps = atol, rtol, ulps

    def __repr__(self):
        return f"Tolerance(atol={self.atol}, rtol={self.rtol}, ulps={self.ulps})"


def check_accuracy(accuracy):
    """jax's ``accuracy=`` argument: None, an AccuracyMode or a Tolerance (podlet's or
    jax's, by name), else ValueError naming it."""
    if accuracy is None or isinstance(accuracy, (AccuracyMode, Tolerance)):
        return accuracy
    if type(accuracy).__name__ in ("AccuracyMode", "Tolerance"):
        return accuracy  # jax's own, left in a half-ported script
    raise ValueError(f"accuracy must be None, a lax.AccuracyMode or a lax.Tolerance, got {accuracy!r}")


def _message(precision):
    return ("precision must be None, a string in " + str(sorted(k for k in _STRINGS if k)) + ", a lax.Precision "
            "value, a pair of those (lhs, rhs), a lax.DotAlgorithmPreset or the name of one "
            f"({', '.join(DotAlgorithmPreset.__members__)}), or a lax.DotAlgorithm; got {precision!r}")


def _foreign(p):
    """jax's own Precision / DotAlgorithmPreset / DotAlgorithm (a half-ported script) as podlet's."""
    name = getattr(p, "name", None)
    kind = type(p).__name__
    if kind == "Precision" and name in Precision.__members__:
        return Precision[name]
    if kind == "DotAlgorithmPreset" and name in DotAlgorithmPreset.__members__:
        return DotAlgorithmPreset[name]
    if kind == "DotAlgorithm" and isinstance(p, tuple):
        return DotAlgorithm(*p)
    return None


def _one(p, whole):
    if isinstance(p, Precision):
        return p
    if isinstance(p, str) and p in _STRINGS:
        return _STRINGS[p]
    f = _foreign(p)
    if isinstance(f, Precision):
        return f
    raise ValueError(_message(whole))


def canonicalize_precision(precision):
    """jax.lax's canonical precision: None, a pair of Precision values (lhs, rhs), a
    DotAlgorithmPreset or a DotAlgorithm, from what jax accepts (None reads
    config.default_matmul_precision). Anything else: ValueError naming it."""
    if precision is None:
        from .config import flags
        default = flags.get("default_matmul_precision")
        return None if default is None else canonicalize_precision(default)
    if isinstance(precision, Precision):
        return precision, precision
    if isinstance(precision, (DotAlgorithmPreset, DotAlgorithm)):
        return _check_algorithm(precision)
    if isinstance(precision, str):
        if precision in _STRINGS:
            return _STRINGS[precision], _STRINGS[precision]
        if precision in DotAlgorithmPreset.__members__:
            return DotAlgorithmPreset[precision]
        raise ValueError(_message(precision))
    f = _foreign(precision)
    if f is not None:
        return canonicalize_precision(f)
    if isinstance(precision, (list, tuple)) and len(precision) == 2:
        return _one(precision[0], precision), _one(precision[1], precision)
    raise ValueError(_message(precision))


def _np_dtype(d):
    from . import dtypes
    return dtypes.dtype(d)


def _check_algorithm(alg):
    if isinstance(alg, DotAlgorithm):
        for field in ("lhs_precision_type", "rhs_precision_type", "accumulation_type"):
            try:
                d = _np_dtype(getattr(alg, field))
            except Exception:
                d = None
            if d is None or not (d.kind == "f" or d.name == "bfloat16"):
                raise ValueError(f"DotAlgorithm.{field} must be a floating-point dtype, got {getattr(alg, field)!r}")
        for field in ("lhs_component_count", "rhs_component_count", "num_primitive_operations"):
            if int(getattr(alg, field)) < 1:
                raise ValueError(f"DotAlgorithm.{field} must be >= 1, got {getattr(alg, field)!r}")
    return alg


def _is_algorithm(p):
    return isinstance(p, (DotAlgorithmPreset, DotAlgorithm))


# ---- a TPU's bf16 algorithms: the primitives' `algorithm` attr (prims/dot_algorithm.h) ----
_TPU_STRINGS = {"bfloat16": "bf16", "bfloat16_3x": "bf16_3x"}
_PRESET_ALGORITHMS = {DotAlgorithmPreset.BF16_BF16_F32: "bf16", DotAlgorithmPreset.BF16_BF16_F32_X3: "bf16_3x",
                      DotAlgorithmPreset.BF16_BF16_F32_X6: "bf16_6x"}
_ACCURACY = {"bf16": 1, "bf16_3x": 2, "bf16_6x": 3, "": 4}  # a pair takes the more precise side


def algorithm(precision):
    """The ``algorithm`` attr of dot_general / the conv primitives for a ``precision=``
    (None reads config.default_matmul_precision): 'bf16' for 'bfloat16' and BF16_BF16_F32,
    'bf16_3x' for 'bfloat16_3x' and BF16_BF16_F32_X3, 'bf16_6x' for BF16_BF16_F32_X6, ''
    (exact f32 products) for everything else. Checks `precision` first (ValueError)."""
    canonicalize_precision(precision)
    if precision is None:
        from .config import flags
        precision = flags.get("default_matmul_precision")
        if precision is None:
            return ""
    if isinstance(precision, str):
        if precision in _TPU_STRINGS:
            return _TPU_STRINGS[precision]
        return _PRESET_ALGORITHMS.get(DotAlgorithmPreset.__members__.get(precision), "")
    if isinstance(precision, DotAlgorithmPreset):
        return _PRESET_ALGORITHMS.get(precision, "")
    if isinstance(precision, (Precision, DotAlgorithm)):
        return ""
    f = _foreign(precision)
    if f is not None:
        return algorithm(f)
    if isinstance(precision, (list, tuple)) and len(precision) == 2:
        sides = [_TPU_STRINGS.get(p, "") if isinstance(p, str) else "" for p in precision]
        return max(sides, key=_ACCURACY.__getitem__)
    return ""


# ---- dot_general under an algorithm: jax's CPU lowering (casts around one exact product) ----
def _round_to(x, dtype):
    """x in `dtype`: a cast, or for float16 (not a podlet dtype) float32 values rounded
    to float16's (reduce_precision: 5 exponent, 10 mantissa bits); float64 even without
    x64 (the primitive's own dtype, below the canonicalisation)."""
    from .. import lax
    from .core import bind
    d = _np_dtype(dtype)
    if d == np.float16:
        x = x if np.dtype(x.dtype) == np.float32 else bind("convert_element_type", x, new_dtype="float32")
        return lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10)
    if np.dtype(x.dtype) == d:
        return x
    return bind("convert_element_type", x, new_dtype=d.name)


def dot_operands(lhs, rhs, precision, preferred_element_type):
    """(lhs, rhs, attrs, finish) for dot_general: the operands cast as jax's CPU lowering
    casts them for the canonical `precision`, the primitive's extra attrs (the result
    dtype, the bf16 algorithm), and `finish` (the accumulated product -> dot_general's
    result dtype)."""
    from . import dtypes
    prec = canonicalize_precision(precision)
    alg = algorithm(precision)
    pet = None if preferred_element_type is None else dtypes.canonicalize(preferred_element_type)
    attrs = {} if pet is None else {"preferred_element_type": pet.name}
    if alg:
        attrs["algorithm"] = alg
    if not _is_algorithm(prec) or prec is DotAlgorithmPreset.DEFAULT:
        return lhs, rhs, attrs, lambda y: y
    if prec not in _CPU_PRESETS:  # every DotAlgorithm too, as jax's CPU lowering
        raise ValueError(f"The precision '{prec}' is not supported by dot_general on CPU (supported: None, "
                         f"lax.Precision values and the presets {sorted(p.name for p in _CPU_PRESETS)})")
    out = pet if pet is not None else dtypes.promote(lhs.dtype, rhs.dtype)

    def keep(d, types):
        return d if types is None or any(_np_dtype(d) == _np_dtype(t) for t in types) else types[0]
    lt = keep(lhs.dtype, prec.supported_lhs_types)
    rt = keep(rhs.dtype, prec.supported_rhs_types)
    acc = keep(out, prec.supported_output_types(lt, rt))
    lhs, rhs = _round_to(lhs, lt), _round_to(rhs, rt)
    acc = _np_dtype(acc)
    f16_acc = acc == np.float16
    attrs = {"preferred_element_type": "float32" if f16_acc else acc.name}
    if alg:
        attrs["algorithm"] = alg

    def finish(y):
        if f16_acc:
            y = _round_to(y, np.float16)
        from .core import bind
        return y if np.dtype(y.dtype) == out else bind("convert_element_type", y, new_dtype=out.name)
    return lhs, rhs, attrs, finish


# ---- convolutions: a bf16 algorithm, or the kernel choice of bf16 convolutions ----
def conv_attr(precision):
    """The conv primitives' 'precision' attr: 'high' / 'highest' (the direct kernel) for
    a pair above DEFAULT or any algorithm but DEFAULT, None for DEFAULT (the kernel may
    choose Winograd)."""
    prec = canonicalize_precision(precision)
    if prec is None or prec is DotAlgorithmPreset.DEFAULT:
        return None
    if _is_algorithm(prec):
        return "highest"
    top = max(prec, key=lambda p: p.value)
    return None if top is Precision.DEFAULT else top.name.lower()


def conv_operands(x, w, precision, preferred_element_type):
    """(x, w, attrs) of the conv primitive: the operands unchanged (no preset casts them,
    as jax's CPU, which ignores a convolution's algorithm); attrs carry the bf16
    algorithm, the kernel choice and the result dtype."""
    from . import dtypes
    attrs = {}
    prec = conv_attr(precision)
    if prec is not None:
        attrs["precision"] = prec
    alg = algorithm(precision)
    if alg:
        attrs["algorithm"] = alg
    if preferred_element_type is not None:
        attrs["preferred_element_type"] = dtypes.canonicalize(preferred_element_type).name
    return x, w, attrs
