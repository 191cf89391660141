"""check_prim: the one oracle harness every primitive test uses.

For a primitive applied to NumPy inputs it checks, in order:
  1. forward (eager) against a NumPy float64 reference, with a tolerance by dtype;
  2. jit(bind) gives bit-identical results to eager;
  3. the VJP against float64 central finite differences along random directions
     (for the argnums listed in grad_argnums);
  4. vmap: the primitive vmapped over VMAP_SIZE stacked, per-element-perturbed inputs
     (in_axes 0 / out_axes 0, then a trailing in-axis with every other operand None and
     out_axes -1) equals, bit for bit, a loop of eager binds stacked with NumPy (on the
     first cases of each operand dtype/rank signature of a primitive).
"""
import numpy as np
import ml_dtypes

import podlet
from podlet._src.core import bind, to_array
from podlet._core import Array

# (rtol, atol) of the forward check, by output dtype.
TOL = {"float64": (1e-12, 1e-12), "float32": (2e-6, 1e-6), "bfloat16": (1.6e-2, 1e-2),
       "int32": (0, 0), "uint32": (0, 0), "uint8": (0, 0), "bool": (0, 0)}


def select_isa(isa):
    """Selects kernel ISA `isa` for a test of that ISA's kernels; at avx512bf16 and amx the
    bf16 dot is turned on (cpu_info()["bf16_dot"]: off by default on Intel, where bf16 GEMMs
    and direct convolutions then run the avx512 kernels, tested at "avx512"), so the
    vdpbf16ps kernels are what runs. A test that calls it restores the setting with
    restore_bf16_dot(). Returns the active ISA."""
    from podlet import _core
    got = _core.set_isa(isa)
    if isa in ("avx512bf16", "amx"):
        _core.set_bf16_dot(True)
    return got


BF16_DOT_DEFAULT = podlet._core.bf16_dot()


def restore_bf16_dot():
    podlet._core.set_bf16_dot(BF16_DOT_DEFAULT)


def as_podlet(x):
    """An exact podlet Array of a NumPy array (no dtype canonicalisation: float64 stays)."""
    x = np.array(x, order="C", copy=True)  # keeps 0-d arrays 0-d (ascontiguousarray does not)
    return Array.from_numpy(x, copy=True)


def to_f64(x):
    x = np.asarray(x)
    if x.dtype == ml_dtypes.bfloat16 or x.dtype.kind == "f":
        return x.astype(np.float64)
    return x


def assert_close(got, want, dtype_name, rtol=None, atol=None, what="output"):
    r, a = TOL[dtype_name]
    r = r if rtol is None else rtol
    a = a if atol is None else atol
    got64, want64 = to_f64(got), np.asarray(want)
    assert got64.shape == want64.shape, f"{what}: shape {got64.shape} != reference {want64.shape}"
    if r == 0 and a == 0:
        np.testing.assert_array_equal(got64, want64, err_msg=what)
    else:
        np.testing.assert_allclose(got64, want64.astype(np.float64), rtol=r, atol=a, err_msg=what)


def bits(x):
    x = np.asarray(x)
    return x.reshape(-1).view(np.uint8) if x.size else x.reshape(-1)


def check_prim(prim, args, attrs=None, ref=None, *, grad_argnums=(), rtol=None, atol=None,
               fd_eps=1e-6, fd_rtol=1e-5, fd_atol=1e-7, n_dirs=2, seed=0, check_jit=True, check_vmap=True):
    """Runs the four checks; returns the eager output as NumPy (tuple if several)."""
    attrs = dict(attrs or {})
    arrs = [as_podlet(a) for a in args]
    out = bind(prim, *arrs, **attrs)
    outs = out if isinstance(out, tuple) else (out,)
    np_outs = tuple(np.asarray(o) for o in outs)
    if ref is not None:
        want = ref(*[to_f64(a) for a in args])
        wants = want if isinstance(want, tuple) else (want,)
        assert len(wants) == len(np_outs), f"{prim}: {len(np_outs)} outputs, reference gave {len(wants)}"
        for i, (g, w) in enumerate(zip(np_outs, wants)):
            assert_close(g, w, outs[i]._dtype_name, rtol, atol, what=f"{prim} output {i}")
    if check_jit:
        jout = podlet.jit(lambda *xs: bind(prim, *xs, **attrs))(*arrs)
        jouts = jout if isinstance(jout, tuple) else (jout,)
        for i, (e, j) in enumerate(zip(np_outs, jouts)):
            assert np.asarray(j).dtype == e.dtype and np.asarray(j).shape == e.shape
            assert np.array_equal(bits(e), bits(np.asarray(j))), f"{prim}: jit output {i} differs from eager"
    if grad_argnums:
        check_vjp(prim, args, attrs, grad_argnums, fd_eps, fd_rtol, fd_atol, n_dirs, seed)
    if check_vmap and _batching_due(prim, args):
        check_batching(prim, args, attrs)
    return np_outs if isinstance(out, tuple) else np_outs[0]


def check_vjp(prim, args, attrs, grad_argnums, eps=1e-6, rtol=1e-5, atol=1e-7, n_dirs=2, seed=0):
    """VJP in float64 against central finite differences: <ct, J d> == <J^T ct, d>."""
    rng = np.random.default_rng(seed)
    args64 = [to_f64(a) if i in grad_argnums else np.asarray(a) for i, a in enumerate(args)]

    def f(*xs):
        return bind(prim, *xs, **attrs)

    primals = [as_podlet(a) for a in args64]
    out, vjp_fn = podlet.vjp(f, *primals)
    ct = rng.standard_normal(np.shape(np.asarray(out)))
    out_dtype = np.asarray(out).dtype
    grads = vjp_fn(as_podlet(np.asarray(ct, out_dtype if out_dtype.kind == "f" else np.float64)))
    for i in grad_argnums:
        g = np.asarray(grads[i])
        assert g.shape == args64[i].shape, f"{prim}: grad {i} shape {g.shape} != {args64[i].shape}"
        for _ in range(n_dirs):
            d = rng.standard_normal(args64[i].shape)
            plus = list(args64)
            minus = list(args64)
            plus[i] = args64[i] + eps * d
            minus[i] = args64[i] - eps * d
            fp = np.asarray(f(*[as_podlet(a) for a in plus]))
            fm = np.asarray(f(*[as_podlet(a) for a in minus]))
            fd = np.sum(ct * (fp - fm)) / (2 * eps)
            an = np.sum(g * d)
            assert abs(fd - an) <= atol + rtol * max(abs(fd), abs(an)) * 10 + 1e-6 * max(1.0, abs(fd)), \
                f"{prim}: VJP wrt arg {i}: analytic {an} vs finite difference {fd}"


VMAP_SIZE = 3
# Each primitive's batching rule is checked on its first cases of every operand
# dtype/rank signature (BATCH_CHECKS_PER_SIGNATURE of them), not on every case of its
# test file: the rule is the same code for every shape, and checking all ~1,700 cases
# doubled the suite's time.
BATCH_CHECKS_PER_SIGNATURE = 2
_batch_checks = {}


def _batching_due(prim, args):
    key = (prim,) + tuple((str(np.asarray(a).dtype), np.ndim(a)) for a in args)
    n = _batch_checks.get(key, 0)
    _batch_checks[key] = n + 1
    return n < BATCH_CHECKS_PER_SIGNATURE

# Contractions whose kernels sum in an order that depends on the problem's shape: the
# batching rules fold the mapped axis into a free dim (dot_general: the reference GEMM's
# Eigen blocking depends on M) or into feature groups (convolutions with both operands
# batched, as XLA does: grouped convolutions take another kernel path). Their vmap is
# compared with the loop up to rounding (same order of magnitude as a different
# summation order), everything else bit for bit.
REORDERED_SUMS = {"dot_general", "conv_general_dilated", "conv_bwd_data", "conv_bwd_filter"}
REORDER_TOL = {"float64": (1e-12, 1e-12), "float32": (2e-5, 2e-5), "bfloat16": (1.6e-2, 1e-2)}


def _element(a, b):
    """Element b of the batch made from operand a: a itself for b = 0, else a perturbed so
    that elements differ but stay in the operand's domain (index operands keep their
    values, rolled; positive data stays positive): the flattened values rolled by b, or,
    for a single value, scaled (floats) / shifted (integers) by b."""
    a = np.asarray(a)
    if b == 0 or a.dtype == np.bool_ and a.size <= 1:
        return a.copy()
    if a.size > 1:
        return np.roll(a.reshape(-1), b).reshape(a.shape)
    if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:
        return (a.astype(np.float64) * (1 + b / 8)).astype(a.dtype)
    return (a.astype(np.int64) + b).astype(a.dtype)


def _eager_outs(prim, xs, attrs):
    out = bind(prim, *[as_podlet(x) for x in xs], **attrs)
    return tuple(np.asarray(o) for o in (out if isinstance(out, tuple) else (out,)))


def check_batching(prim, args, attrs, size=VMAP_SIZE):
    """vmap(bind(prim)) == a loop of eager binds, bit for bit, for two axis layouts."""
    args = [np.asarray(a) for a in args]
    elems = [[_element(a, b) for a in args] for b in range(size)]
    f = lambda *xs: bind(prim, *xs, **attrs)
    # Layout 1: every operand mapped along axis 0, outputs along axis 0.
    # Layout 2: the mapped axis last for operands 0, 2, ..; operands 1, 3, .. not mapped
    # (when there are several), outputs mapped along their last axis.
    n = len(args)
    layouts = [([0] * n, 0), ([a.ndim if (k % 2 == 0 or n == 1) else None for k, a in enumerate(args)], -1)]
    for in_axes, out_axis in layouts:
        stacked = []
        for k, ax in enumerate(in_axes):
            if ax is None:
                stacked.append(as_podlet(args[k]))
            else:
                stacked.append(as_podlet(np.stack([elems[b][k] for b in range(size)], axis=ax)))
        loop = [_eager_outs(prim, [elems[b][k] if in_axes[k] is not None else args[k] for k in range(n)], attrs)
                for b in range(size)]
        got = podlet.vmap(f, in_axes=tuple(in_axes), out_axes=out_axis)(*stacked)
        gots = got if isinstance(got, tuple) else (got,)
        assert len(gots) == len(loop[0]), f"{prim}: vmap gave {len(gots)} outputs, expected {len(loop[0])}"
        for i, g in enumerate(gots):
            want = np.stack([loop[b][i] for b in range(size)], axis=out_axis)
            g = np.asarray(g)
            what = f"{prim}: vmap(in_axes={in_axes}, out_axes={out_axis}) output {i}"
            assert g.dtype == want.dtype and g.shape == want.shape, \
                f"{what}: {g.dtype}{g.shape} != loop's {want.dtype}{want.shape}"
            if prim in REORDERED_SUMS and str(g.dtype) in REORDER_TOL and not np.array_equal(bits(g), bits(want)):
                r, a = REORDER_TOL[str(g.dtype)]
                np.testing.assert_allclose(to_f64(g), to_f64(want), rtol=r, atol=a * max(1.0, np.abs(to_f64(want)).max()),
                                           err_msg=what)
                continue
            assert np.array_equal(bits(g), bits(want)), f"{what} differs from a loop of eager binds"
