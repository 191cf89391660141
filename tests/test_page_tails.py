"""Kernels on operands that end (or start) at a page boundary next to an inaccessible page.

A vector loop's tail is where it may read or write past an operand: a full-width load
where a masked or scalar one was needed. Inside a buffer's 64-byte rounding the extra
bytes are readable and the mistake is silent (the sanitizer build poisons that slack:
scripts/sanitize.sh). Here each operand is wrapped zero-copy (to_array wraps aligned,
C-contiguous NumPy arrays) from an mmap whose next (or previous) page is PROT_NONE, so an
access past the last (or before the first) byte faults. Operands start 64-byte aligned, as
every podlet buffer does, so a flat loop's tail never crosses a page; the shapes here
have rows with tails ((16, 7) f32, (32, 7) bf16, 3 channels), so the tail of the last row
ends exactly at the guard page. Every ISA path the host has is run (set_isa), eager and
under jit, forward and gradient, and checked against NumPy float64.
"""
import ml_dtypes
import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import _core, lax
from guard_pages import guarded
from prim_check import restore_bf16_dot, select_isa

BF16 = ml_dtypes.bfloat16
ISAS = _core.cpu_info()["available_isas"]


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def close(got, want, dtype, scale=1.0):
    tol = 2e-2 if dtype == BF16 else 1e-4
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol * scale)


@pytest.fixture(autouse=True)
def restore_isa():
    isa = _core.active_isa()
    yield
    _core.set_isa(isa)
    restore_bf16_dot()


CASES = []


def case(fn):
    CASES.append(fn)
    return fn


@case
def matmul(rng, dtype, where):
    # K = 7: every row of a and the whole of b end in a tail; b (7, 16) ends at the page.
    rows = 16 if dtype == np.float32 else 32
    a, b = rand(rng, (rows, 7), dtype), rand(rng, (7, rows), dtype)
    ga, gb = guarded(a, where), guarded(b, where)
    want = a.astype(np.float64) @ b.astype(np.float64)
    return (lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32)), (ga, gb), want, 7.0


@case
def matmul_transposed(rng, dtype, where):
    rows = 16 if dtype == np.float32 else 32
    a, b = rand(rng, (rows, 7), dtype), rand(rng, (rows, 7), dtype)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    return (lambda x, y: jnp.dot(x, y.T, preferred_element_type=jnp.float32)), (guarded(a, where), guarded(b, where)), want, 7.0


@case
def conv_3_channels(rng, dtype, where):
    # NHWC with C = 3 (the stem's shape family): each pixel's channels are a tail.
    n = 16 if dtype == np.float32 else 32
    x, w = rand(rng, (n, 4, 4, 3), dtype), rand(rng, (3, 3, 3, n), dtype)
    gx, gw = guarded(x, where), guarded(w, where)
    dn = ("NHWC", "HWIO", "NHWC")

    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn,
                                        preferred_element_type=jnp.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((n, 4, 4, n))
    for i in range(3):
        for j in range(3):
            want += np.einsum("nhwc,co->nhwo", xp[:, i:i + 4, j:j + 4, :], w[i, j].astype(np.float64))
    return f, (gx, gw), want, 27.0


@case
def softmax_rows(rng, dtype, where):
    rows = 16 if dtype == np.float32 else 32
    x = rand(rng, (rows, 7), dtype)
    e = np.exp(x.astype(np.float64) - x.astype(np.float64).max(-1, keepdims=True))
    return (lambda x: podlet.nn.softmax(x.astype(jnp.float32), axis=-1)), (guarded(x, where),), e / e.sum(-1, keepdims=True), 1.0


@case
def normalize_rows(rng, dtype, where):
    # LayerNorm's arithmetic: two reductions over a 7-wide row and a fused pass.
    rows = 16 if dtype == np.float32 else 32
    x = rand(rng, (rows, 7), dtype)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    want = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5)

    def f(x):
        x = x.astype(jnp.float32)
        m = x.mean(-1, keepdims=True)
        return (x - m) * lax.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
    return f, (guarded(x, where),), want, 1.0


@case
def fused_layer_norm_rows(rng, dtype, where):
    # The fused layer_norm / layer_norm_bwd kernels (prims/norm.cc) on the guarded rows
    # themselves, bf16 read without a cast first.
    rows = 16 if dtype == np.float32 else 32
    x = rand(rng, (rows, 7), dtype)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    want = (x64 - mu) / np.sqrt(np.maximum((x64 * x64).mean(-1, keepdims=True) - mu * mu, 0) + 1e-6)
    return (lambda x: podlet.nn.LayerNorm(use_scale=False, use_bias=False).apply({}, x)), (guarded(x, where),), \
        want, 1.0


@case
def fused_softmax_rows(rng, dtype, where):
    # The fused softmax / softmax_bwd kernels on guarded rows of the input's own dtype.
    rows = 16 if dtype == np.float32 else 32
    x = rand(rng, (rows, 7), dtype)
    e = np.exp(x.astype(np.float64) - x.astype(np.float64).max(-1, keepdims=True))
    return (lambda x: podlet.nn.softmax(x, axis=-1)), (guarded(x, where),), e / e.sum(-1, keepdims=True), 1.0


@case
def reduce_and_transpose(rng, dtype, where):
    rows = 16 if dtype == np.float32 else 32
    x = rand(rng, (rows, 7), dtype)
    x64 = x.astype(np.float64)
    want = np.concatenate([x64.max(0), x64.sum(1), x64.T.ravel()])

    def f(x):
        x = x.astype(jnp.float32)
        return jnp.concatenate([x.max(0), x.sum(1), x.T.ravel()])
    return f, (guarded(x, where),), want, 7.0


@case
def convert_and_elementwise(rng, dtype, where):
    rows = 16 if dtype == np.float32 else 32
    x = rand(rng, (rows, 7), dtype)
    x64 = x.astype(np.float64)
    want = np.tanh(x64) * 2 + np.maximum(x64, 0)
    return (lambda x: jnp.tanh(x.astype(jnp.float32)) * 2 + jnp.maximum(x.astype(jnp.float32), 0)), \
        (guarded(x, where),), want, 1.0


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("where", ["end", "start"])
@pytest.mark.parametrize("make", CASES, ids=[c.__name__ for c in CASES])
def test_forward_at_page_boundary(make, where, dtype, isa):
    select_isa(isa)
    f, args, want, scale = make(np.random.default_rng(0), dtype, where)
    close(f(*args), want, dtype, scale)
    close(podlet.jit(f)(*args), want, dtype, scale)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("make", CASES, ids=[c.__name__ for c in CASES])
def test_gradient_at_page_boundary(make, dtype, isa):
    # The backward kernels (transposed GEMMs, conv backward-data and -filter, reduction
    # VJPs) read the guarded operands again and write cotangents of their shapes. The
    # float32 cast inside keeps the sum's cotangent f32; the check is that nothing faults
    # and that all ISA paths agree with the reference path.
    _core.set_isa("ref")
    f, args, _, _ = make(np.random.default_rng(1), dtype, "end")
    loss = lambda *a: jnp.sum(f(*a).astype(jnp.float32) ** 2)
    argnums = tuple(range(len(args)))
    want = podlet.jit(podlet.grad(loss, argnums=argnums))(*args)
    select_isa(isa)
    got = podlet.jit(podlet.grad(loss, argnums=argnums))(*args)
    for g, w in zip(got, want):
        w = np.asarray(w, np.float64)
        tol = 2e-2 if dtype == BF16 else 1e-4
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=tol, atol=tol * (np.abs(w).max() + 1))


def test_guard_page_faults_are_real():
    # The fixture must be able to fail: the guard page really is inaccessible (checked in
    # a child process, since the access kills it).
    import subprocess
    import sys
    code = ("import numpy as np, sys; sys.path.insert(0, 'tests'); import guard_pages as t; "
            "a = t.guarded(np.ones((16, 7), np.float32), 'end'); "
            "import ctypes; p = a.ctypes.data + a.nbytes; print('reading', flush=True); "
            "ctypes.c_char.from_address(p).value")
    import os
    # The child runs without a sanitizer runtime (whose SEGV handler would turn the fault
    # into a report and an exit code); it does not import podlet.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=__file__.rsplit("/tests/", 1)[0])
    assert "reading" in r.stdout and r.returncode < 0, (r.returncode, r.stdout, r.stderr[-2000:])
