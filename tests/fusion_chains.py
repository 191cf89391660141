"""Helpers shared by the fusion tests (test_fusion.py, test_fused_jit.py): bitwise
comparison of outputs and random elementwise chains."""
import contextlib

import numpy as np

import podlet.numpy as jnp
from podlet import _core, lax
from podlet._src import dtypes

BF16 = dtypes.bfloat16


@contextlib.contextmanager
def active_isa(name):
    """The active ISA set to `name` inside (the code generators follow it), the host's after."""
    old = _core.active_isa()
    _core.set_isa(name)
    try:
        yield name
    finally:
        _core.set_isa(old)


def bits(a):
    """The array's bit patterns (floats as unsigned ints of their width)."""
    a = np.asarray(a)
    view = {BF16: np.uint16, np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}.get(a.dtype)
    return a.view(view) if view is not None else a


def assert_same_bits(xs, ys):
    assert len(xs) == len(ys)
    for i, (x, y) in enumerate(zip(xs, ys)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (i, x.dtype, y.dtype, x.shape, y.shape)
        np.testing.assert_array_equal(bits(x), bits(y), err_msg=f"output {i}")


def random_chain(seed, steps, n_ops, outputs):
    """A random elementwise function of (x, y, z [full], c [per channel], s [0-d]): n_ops
    steps, each a kind drawn from `steps` (name -> step(r, a, b, c, s), r its own
    Generator) applied to two values drawn from those so far; `outputs(vals)` picks the
    results."""
    rng = np.random.default_rng(seed)
    names = list(steps)
    plan = [(rng.choice(names), rng.integers(0, 1 << 30)) for _ in range(n_ops)]

    def fun(x, y, z, c, s):
        vals = [x, y, z]
        for kind, r in plan:
            r = np.random.default_rng(r)
            a = vals[r.integers(len(vals))]
            b = vals[r.integers(len(vals))]
            vals.append(steps[str(kind)](r, a, b, c, s).astype(a.dtype))
        return outputs(vals)

    return fun


def bn_statistics(ndim, dtype):
    """BatchNorm's training statistics of x (sum and sum of squares over the leading axes)
    beside an elementwise result: the sums fuse into the pass that computes x."""
    axes = tuple(range(ndim - 1))

    def f(x):
        xf = x.astype(np.float32) * 1.5
        return jnp.sum(xf, axes), jnp.sum(lax.integer_pow(xf, 2), axes), (xf - 1.0).astype(dtype)

    return f
