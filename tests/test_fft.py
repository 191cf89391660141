"""podlet.numpy.fft and podlet.lax.fft against jax.numpy.fft / jax.lax.fft (and NumPy in
float64) on the same inputs: values (relative to the output's largest magnitude), dtypes
and shapes for every function, norm mode, odd / even / prime lengths, axes, n and s
padding and truncation; the accuracy at large and prime sizes (direct DFT, four-step and
Bluestein paths); gradients against jax.grad and central finite differences; jit and
vmap; JAX's errors."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import podlet
import podlet.numpy as pnp
from podlet import lax as plax
from podlet._src import fft as pfft_impl
from podlet._src.complex import ComplexArray

rng = np.random.default_rng(0)
NORMS = [None, "backward", "ortho", "forward"]


def _c(*shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _check(got, want, what, tol=2e-6):
    want = np.asarray(want)
    assert np.dtype(got.dtype) == want.dtype, f"{what}: dtype {got.dtype} != jax {want.dtype}"
    assert tuple(got.shape) == want.shape, f"{what}: shape {tuple(got.shape)} != jax {want.shape}"
    g = np.asarray(got)
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-30)
    err = float(np.abs(g - want).max()) / scale if want.size else 0.0
    assert err <= tol, f"{what}: max error {err:.3g} relative to the largest magnitude (tolerance {tol})"


# ---------------------------------------------------------------------------------
# 1-D transforms: every norm, lengths 1 .. prime, n padding / truncation, axes
# ---------------------------------------------------------------------------------
ONE_D = []
for k, (n_in, n, axis) in enumerate([(1, None, -1), (2, None, -1), (7, None, 0), (12, 5, -1), (16, 20, 0),
                                     (97, None, -1), (100, None, 1), (128, 120, -1), (9, 16, -1)]):
    for f in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
        ONE_D.append((f, n_in, n, axis, NORMS[(k + len(ONE_D)) % 4]))


@pytest.mark.parametrize("name,n_in,n,axis,norm", ONE_D)
def test_1d_like_jax(name, n_in, n, axis, norm):
    shape = [3, 2]
    shape.insert(axis % 3 if axis >= 0 else 2, n_in)
    if name in ("irfft", "hfft") and n is None and n_in == 1:
        n = 1  # default 2 * (1 - 1) = 0 is an error in both
    x = _r(*shape) if name in ("rfft", "ihfft") else _c(*shape)
    got = getattr(pnp.fft, name)(x, n=n, axis=axis, norm=norm)
    want = getattr(jnp.fft, name)(x, n=n, axis=axis, norm=norm)
    _check(got, want, f"{name}(n_in={n_in}, n={n}, axis={axis}, norm={norm})")


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft"])
def test_real_and_integer_inputs(name):
    for x in (_r(5, 12), rng.integers(-5, 5, (5, 12)).astype(np.int32)):
        _check(getattr(pnp.fft, name)(x), getattr(jnp.fft, name)(x), f"{name}({x.dtype})")
        _check(getattr(pnp.fft, name)(pnp.asarray(x)), getattr(jnp.fft, name)(x), f"{name}(podlet {x.dtype})")


def test_irfft_ignores_the_imaginary_parts_of_dc_and_nyquist_like_jax():
    x = _c(4, 9)
    for n in (16, 17):
        _check(pnp.fft.irfft(x, n), jnp.fft.irfft(x, n), f"irfft n={n}")


# ---------------------------------------------------------------------------------
# 2-D and N-D transforms
# ---------------------------------------------------------------------------------
ND = [
    ("fft2", dict()), ("ifft2", dict(norm="ortho")), ("fft2", dict(axes=(0, 2), s=(4, 6))),
    ("ifft2", dict(axes=(-1, 0), norm="forward")), ("rfft2", dict()), ("rfft2", dict(s=(3, 10), norm="ortho")),
    ("irfft2", dict()), ("irfft2", dict(s=(5, 9), axes=(0, 1))), ("fftn", dict()), ("fftn", dict(axes=(1,))),
    ("fftn", dict(s=(2, 3), norm="forward")), ("ifftn", dict(axes=(2, 0, 1))), ("rfftn", dict()),
    ("rfftn", dict(axes=(0, 2), norm="ortho")), ("irfftn", dict()), ("irfftn", dict(s=(4, 6, 7), norm="forward")),
    ("irfftn", dict(axes=(1, 0))),
]


@pytest.mark.parametrize("name,kw", ND, ids=[f"{n}-{k}" for n, k in ND])
def test_nd_like_jax(name, kw):
    x = _r(4, 5, 6) if name.startswith("rfft") else _c(4, 5, 6)
    _check(getattr(pnp.fft, name)(x, **kw), getattr(jnp.fft, name)(x, **kw), f"{name}({kw})")


def test_four_axes_and_more_than_three_dimensions():
    x = _c(3, 2, 4, 5)
    _check(pnp.fft.fftn(x), jnp.fft.fftn(x), "fftn over 4 axes")
    _check(pnp.fft.ifftn(x, norm="ortho"), jnp.fft.ifftn(x, norm="ortho"), "ifftn over 4 axes")
    xr = _r(3, 2, 4, 6)
    _check(pnp.fft.rfftn(xr), jnp.fft.rfftn(xr), "rfftn over 4 axes")
    _check(pnp.fft.irfftn(x), jnp.fft.irfftn(x), "irfftn over 4 axes")


# ---------------------------------------------------------------------------------
# accuracy on large and prime sizes (every algorithm path)
# ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [97, 1009, 2018, 4096, 4099, 6000])
def test_accuracy_large_and_prime_sizes(n):
    plan = pfft_impl._plan(n)[0]
    assert plan == {97: "direct", 1009: "direct", 4099: "bluestein"}.get(n, "split")
    x = _c(2, n)
    got = pnp.fft.fft(x)
    _check(got, jnp.fft.fft(x), f"fft n={n} vs jax", tol=1e-5)
    _check(got, np.fft.fft(x.astype(np.complex128)).astype(np.complex64), f"fft n={n} vs numpy float64", tol=1e-5)
    xr = x.real.copy()
    spec = pnp.fft.rfft(xr)
    _check(spec, jnp.fft.rfft(xr), f"rfft n={n}", tol=1e-5)
    _check(pnp.fft.irfft(spec, n), jnp.fft.irfft(jnp.fft.rfft(xr), n), f"irfft n={n}", tol=1e-5)


def test_complex128_under_x64_against_numpy():
    podlet.config.update("jax_enable_x64", True)
    try:
        for n in (12, 97, 640, 4099):
            x = rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))
            got = pnp.fft.fft(x)
            assert got.dtype == np.complex128
            _check(got, np.fft.fft(x), f"complex128 fft n={n}", tol=1e-12)
            _check(pnp.fft.irfft(pnp.fft.rfft(x.real)), np.fft.irfft(np.fft.rfft(x.real)), f"f64 round trip {n}",
                   tol=1e-12)
    finally:
        podlet.config.update("jax_enable_x64", False)


# ---------------------------------------------------------------------------------
# helpers: frequencies and shifts
# ---------------------------------------------------------------------------------
def test_fftfreq_rfftfreq_like_jax():
    for n in (1, 7, 8):
        for d in (1.0, 0.1)[:1 if n == 1 else 2]:
            # XLA divides by the constant d * n as a multiply by its reciprocal: one rounding more
            _check(pnp.fft.fftfreq(n, d), jnp.fft.fftfreq(n, d), f"fftfreq({n}, {d})", tol=2e-7)
            _check(pnp.fft.rfftfreq(n, d), jnp.fft.rfftfreq(n, d), f"rfftfreq({n}, {d})", tol=2e-7)
            np.testing.assert_array_equal(np.asarray(pnp.fft.fftfreq(n, d)), np.fft.fftfreq(n, d).astype(np.float32))
    _check(pnp.fft.fftfreq(8, dtype=pnp.int32), jnp.fft.fftfreq(8, dtype=jnp.int32), "fftfreq int32", tol=0)
    _check(pnp.fft.fftfreq(6, pnp.asarray(np.float32(0.5))), jnp.fft.fftfreq(6, jnp.float32(0.5)), "array d", tol=0)


@pytest.mark.parametrize("axes", [None, 0, 1, (0, 1), (1,)])
def test_shifts_like_jax(axes):
    for x in (_r(5, 6), _c(4, 7)):
        _check(pnp.fft.fftshift(x, axes), jnp.fft.fftshift(x, axes), f"fftshift {x.dtype} {axes}", tol=0)
        _check(pnp.fft.ifftshift(x, axes), jnp.fft.ifftshift(x, axes), f"ifftshift {x.dtype} {axes}", tol=0)


# ---------------------------------------------------------------------------------
# lax.fft
# ---------------------------------------------------------------------------------
LAX = [("FFT", (8,)), ("IFFT", (8,)), ("FFT", (5, 8)), ("IFFT", (3, 5, 8)), ("RFFT", (8,)), ("RFFT", (5, 8)),
       ("IRFFT", (14,)), ("IRFFT", (5, 15)), ("fft", (8,)), ("irfft", (3, 5, 8))]


@pytest.mark.parametrize("typ,lengths", LAX)
def test_lax_fft_like_jax(typ, lengths):
    shape = (2, 3, 5, 8)
    if typ.upper() == "IRFFT":
        shape = (2,) + tuple(lengths[:-1]) + (lengths[-1] // 2 + 1,)
        shape = (2,) * (4 - len(shape)) + shape
    x = _r(*shape) if typ.upper() == "RFFT" else _c(*shape)
    ptyp = getattr(plax.FftType, typ) if typ.isupper() else typ
    jtyp = getattr(jax.lax.FftType, typ) if typ.isupper() else typ
    _check(plax.fft(x, ptyp, lengths), jax.lax.fft(x, jtyp, lengths), f"lax.fft {typ} {lengths}")


def test_fft_type_enum_like_jax():
    assert [(t.name, int(t)) for t in plax.FftType] == [(t.name, int(t)) for t in jax.lax.FftType]


# ---------------------------------------------------------------------------------
# transformations
# ---------------------------------------------------------------------------------
GRADS = {
    "|fft|^2": lambda m: lambda x: m.sum(m.abs(m.fft.fft(x)) ** 2),
    "real ifft (n padded)": lambda m: lambda x: m.sum(m.real(m.fft.ifft(x * (1 + 1j), n=20)) ** 3),
    "rfft filter irfft": lambda m: lambda x: m.sum(m.fft.irfft(m.fft.rfft(x) * m.arange(7.0), 12) ** 2),
    "fft2 ortho": lambda m: lambda x: m.sum(m.imag(m.fft.fft2(x.reshape(3, 4), norm="ortho")) ** 2),
    "hfft": lambda m: lambda x: m.sum(m.sin(m.fft.hfft(x[:7] + 1j * x[5:], n=11))),
    "ihfft forward": lambda m: lambda x: m.sum(m.abs(m.fft.ihfft(x, norm="forward"))),
    "four-step 128": lambda m: lambda x: m.sum(m.abs(m.fft.fft(m.tile(x, 11)[:128])) ** 2),
    "bluestein 2053": lambda m: lambda x: m.sum(m.real(m.fft.fft(m.tile(x, 172)[:2053])) ** 2),
}


@pytest.mark.parametrize("name", list(GRADS))
def test_grad_like_jax(name):
    x = _r(12)
    got = podlet.grad(GRADS[name](pnp))(x)
    want = jax.jit(jax.grad(GRADS[name](jnp)))(x)  # one compile, not one per op
    _check(got, want, f"grad {name}", tol=2e-5)


def test_grad_finite_differences_float64():
    podlet.config.update("jax_enable_x64", True)
    try:
        f = lambda x: pnp.sum(pnp.abs(pnp.fft.rfft(x, n=40)) ** 2 * pnp.arange(21.0)) + pnp.sum(
            pnp.fft.irfft(pnp.fft.fft(x) * 1j, 9) ** 2)
        x = rng.standard_normal(30)
        g = np.asarray(podlet.grad(f)(pnp.asarray(x)))
        for _ in range(2):
            d = rng.standard_normal(30)
            eps = 1e-6
            fd = (float(f(pnp.asarray(x + eps * d))) - float(f(pnp.asarray(x - eps * d)))) / (2 * eps)
            np.testing.assert_allclose(g @ d, fd, rtol=1e-7)
    finally:
        podlet.config.update("jax_enable_x64", False)


def test_jit_and_vmap():
    x = _c(4, 96)
    f = lambda a: pnp.fft.fft(a, norm="ortho")
    with pytest.raises(TypeError, match="convert complex NumPy data with podlet.numpy.asarray"):
        podlet.jit(f)(x)
    out = podlet.jit(f)(pnp.asarray(x))
    assert isinstance(out, ComplexArray)
    _check(out, jnp.fft.fft(x, norm="ortho"), "jit fft")
    np.testing.assert_allclose(np.asarray(out), np.asarray(f(x)), rtol=1e-6, atol=1e-6)
    _check(podlet.vmap(f)(pnp.asarray(x)), jnp.fft.fft(x, norm="ortho"), "vmap fft")
    _check(podlet.vmap(lambda a: pnp.fft.rfft(a), in_axes=1, out_axes=1)(x.real.copy()),
           jnp.fft.rfft(x.real, axis=0), "vmap rfft over axis 1")
    _check(podlet.jit(lambda a: pnp.fft.irfft2(pnp.fft.rfft2(a)))(x.real.copy()), x.real, "jit round trip", tol=1e-5)


# ---------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------
def test_errors():
    x = _c(4, 6)
    with pytest.raises(ValueError, match='Invalid norm value ortho2; should be "backward", "ortho" or "forward"'):
        pnp.fft.fft(x, norm="ortho2")
    with pytest.raises(ValueError, match="does not support repeated axes"):
        pnp.fft.fftn(x, axes=(1, -1))
    with pytest.raises(ValueError, match="Shape and axes have different lengths"):
        pnp.fft.fftn(x, s=(2, 3), axes=(0,))
    with pytest.raises(ValueError, match="Shape should be positive"):
        pnp.fft.fft(x, n=0)
    with pytest.raises(ValueError, match="does not support multiple axes. Please use jax.numpy.fft.fftn"):
        pnp.fft.fft(x, axis=(0, 1))
    with pytest.raises(ValueError, match="only supports 2 axes"):
        pnp.fft.fft2(x, axes=(0,))
    with pytest.raises(ValueError, match="only real valued inputs supported for rfft"):
        pnp.fft.rfft(x)
    with pytest.raises(ValueError, match="axis 2 is out of bounds"):
        pnp.fft.fft(x, axis=2)
    with pytest.raises(ValueError, match=r"transformed lengths \(0,\) must be positive"):
        pnp.fft.irfft(_c(3, 1))
    with pytest.raises(ValueError, match="Unknown FFT type 'dft'"):
        plax.fft(x, "dft", (6,))
    with pytest.raises(TypeError, match="Unknown FFT type value '7'"):
        plax.fft(x, 7, (6,))
    with pytest.raises(ValueError, match=r"minor dimensions must be equal to fft_lengths \(5,\)"):
        plax.fft(x, plax.FftType.FFT, (5,))
    with pytest.raises(ValueError, match="at least as many input dimensions"):
        plax.fft(x, "fft", (2, 4, 6))
    with pytest.raises(ValueError, match="only takes an int"):
        pnp.fft.fftfreq([4])
