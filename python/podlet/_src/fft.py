"""podlet.numpy.fft (jax.numpy.fft) and podlet.lax.fft / FftType, from real primitives.

Complex values are pairs of real arrays (_src/complex.py), and a DFT is built from
matmuls with cos / sin matrices computed in float64 NumPy and cast, so grad, jit and
vmap need no FFT rules. One transform along the last axis, of length n:

- n <= 64, or a prime up to 2048, or a factor that is such a prime: the direct DFT,
  x @ W with W[j, k] = exp(-+2 pi i jk / n) (4 real matmuls, 2 for a real input);
- n = n1 * n2 with n1 <= 64 (near sqrt(n)): the "four-step" decomposition. With
  j = n2 j1 + j2 and k = k1 + n1 k2, X[k1 + n1 k2] =
  sum_j2 w_n^(j2 k1) w_n2^(j2 k2) [sum_j1 x[n2 j1 + j2] w_n1^(j1 k1)]: a size-n1 DFT
  over j1 (a GEMM contracting the reshaped input's axis -2 with the n1 x n1 matrix, no
  broadcast batch), the twiddles w_n^(j2 k1), the size-n2 DFTs over j2 (the same
  contraction when n2 is direct, else a recursion), one transpose at the end;
- a prime factor above 2048: Bluestein's chirp-z, a cyclic convolution of power-of-two
  length M >= 2n - 1 done with the transforms above (the chirp's spectrum is a float64
  NumPy constant).

Angles are reduced exactly (jk mod n in integers) before the float64 cos / sin.
The public functions follow jax/_src/numpy/fft.py line by line: crop / pad to s,
move the axes last, lax.fft over them, the norm factor, axes moved back.
"""
import builtins as _bi
import enum
import functools
import math
import operator
import sys

import numpy as np

from .. import lax
from .. import numpy as jnp
from . import complex as _c
from .core import Array, Tracer, to_array

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn",
           "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_DIRECT_MAX = 64
_PRIME_DIRECT_MAX = 2048


# ---------------------------------------------------------------------------------
# constants (float64 NumPy, cast once, cached as engine arrays)
# ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _dft_mats(n, sign, pd):
    """(C, S) with C + iS = W, W[j, k] = exp(sign 2 pi i jk / n) (symmetric)."""
    j = np.arange(n, dtype=np.int64)
    ang = (2 * np.pi / n) * (np.outer(j, j) % n)
    return to_array(np.cos(ang).astype(pd)), to_array((sign * np.sin(ang)).astype(pd))


@functools.lru_cache(maxsize=256)
def _rdft_mats(n, pd):
    """The first n//2 + 1 columns of the forward DFT matrix, for a real input."""
    m = n // 2 + 1
    j = np.arange(n, dtype=np.int64)
    ang = (2 * np.pi / n) * (np.outer(j, np.arange(m)) % n)
    return to_array(np.cos(ang).astype(pd)), to_array((-np.sin(ang)).astype(pd))


@functools.lru_cache(maxsize=256)
def _irdft_mats(n, pd):
    """x[j] = sum_k c_k (Xr[k] cos(2 pi jk / n) - Xi[k] sin(2 pi jk / n)), k < n//2 + 1,
    c_0 = 1, c_(n/2) = 1 for even n, else 2: the Hermitian-symmetric inverse (unnormalised).
    The imaginary parts of X[0] and X[n/2] drop out (their sines vanish), as in XLA."""
    m = n // 2 + 1
    k = np.arange(m, dtype=np.int64)
    c = np.full(m, 2.0)
    c[0] = 1.0
    if n % 2 == 0:
        c[-1] = 1.0
    ang = (2 * np.pi / n) * (np.outer(k, np.arange(n)) % n)
    return to_array((c[:, None] * np.cos(ang)).astype(pd)), to_array((-c[:, None] * np.sin(ang)).astype(pd))


@functools.lru_cache(maxsize=256)
def _twiddles(n1, n2, sign, pd):
    """T[j2, k1] = exp(sign 2 pi i j2 k1 / (n1 n2)), shape (n2, n1)."""
    n = n1 * n2
    ang = (2 * np.pi / n) * (np.outer(np.arange(n2, dtype=np.int64), np.arange(n1, dtype=np.int64)) % n)
    return to_array(np.cos(ang).astype(pd)), to_array((sign * np.sin(ang)).astype(pd))


@functools.lru_cache(maxsize=64)
def _chirp(n, m_len, sign, pd):
    """Bluestein's w[j] = exp(sign i pi j^2 / n) (j < n) and the spectrum of the cyclic
    kernel b (b[m] = b[M - m] = conj(w[m])), both as (re, im)."""
    j = np.arange(n, dtype=np.int64)
    ang = np.pi * ((j * j) % (2 * n)) / n
    w = np.exp(sign * 1j * ang)
    b = np.zeros(m_len, np.complex128)
    b[:n] = np.conj(w)
    b[m_len - n + 1:] = np.conj(w[1:])[::-1]
    fb = np.fft.fft(b)
    arr = lambda v: to_array(np.ascontiguousarray(v).astype(pd))
    return arr(w.real), arr(w.imag), arr(fb.real), arr(fb.imag)


def _smallest_factor(n):
    for p in range(2, math.isqrt(n) + 1):
        if n % p == 0:
            return p
    return n


def _plan(n):
    if n <= _DIRECT_MAX:
        return ("direct",)
    cap = _bi.min(_DIRECT_MAX, math.isqrt(n) + 1)
    for d in range(cap, 1, -1):
        if n % d == 0:
            return ("split", d, n // d)
    p = _smallest_factor(n)
    if p == n:
        if n <= _PRIME_DIRECT_MAX:
            return ("direct",)
        return ("bluestein", 1 << (2 * n - 2).bit_length())
    if p <= _PRIME_DIRECT_MAX:
        return ("split", p, n // p)
    return ("bluestein", 1 << (2 * n - 2).bit_length())


# ---------------------------------------------------------------------------------
# one transform along the last axis, on (re, im) parts; im None means zero
# ---------------------------------------------------------------------------------
_add, _sub, _mul = _c._add, _c._sub, _c._mul


def _contract(x, w, axis):
    """x's axis contracted with w's first axis, the new axis last: one GEMM, no batch
    dimensions (jnp.matmul would broadcast w over x's leading axes)."""
    if x is None or w is None:
        return None
    return lax.dot_general(x, w, (([axis % x.ndim], [0]), ([], [])))


def _cdft(re, im, c, s, axis):
    """(re + i im) times (c + i s) contracted over axis (moved last)."""
    k = lambda a, b: _contract(a, b, axis)
    return _sub(k(re, c), k(im, s)), _add(k(re, s), k(im, c))


def _fft_last(re, im, sign):
    """Unnormalised DFT of (re + i im) along the last axis, exp(sign 2 pi i jk / n)."""
    n = re.shape[-1]
    pd = np.dtype(re.dtype)
    plan = _plan(n)
    if plan[0] == "direct":
        return _cdft(re, im, *_dft_mats(n, sign, pd), -1)
    if plan[0] == "split":
        n1, n2 = plan[1], plan[2]
        lead = tuple(re.shape[:-1])
        a = lambda v: None if v is None else jnp.reshape(v, lead + (n1, n2))  # [j1, j2]
        br, bi = _cdft(a(re), a(im), *_dft_mats(n1, sign, pd), -2)  # size-n1 DFTs over j1: [j2, k1]
        cr, ci = _c._cmul(br, bi, *_twiddles(n1, n2, sign, pd))
        if _plan(n2)[0] == "direct":
            dr, di = _cdft(cr, ci, *_dft_mats(n2, sign, pd), -2)  # over j2: [k1, k2]
        else:
            dr, di = _fft_last(jnp.swapaxes(cr, -1, -2), jnp.swapaxes(ci, -1, -2), sign)
        out = lambda v: jnp.reshape(jnp.swapaxes(v, -1, -2), lead + (n,))  # X[k1 + n1 k2]
        return out(dr), out(di)
    m_len = plan[1]
    wr, wi, fr, fi = _chirp(n, m_len, sign, pd)
    ar, ai = _c._cmul(re, im, wr, wi)
    padw = [(0, 0)] * (re.ndim - 1) + [(0, m_len - n)]
    ar, ai = jnp.pad(ar, padw), (None if ai is None else jnp.pad(ai, padw))
    xr, xi = _fft_last(ar, ai, -1)
    pr, pi_ = _c._cmul(xr, xi, fr, fi)
    yr, yi = _fft_last(pr, pi_, 1)
    yr, yi = yr[..., :n], yi[..., :n]
    zr, zi = _c._cmul(yr, yi, wr, wi)
    return jnp.multiply(zr, 1.0 / m_len), jnp.multiply(zi, 1.0 / m_len)


def _rfft_last(x):
    n = x.shape[-1]
    if _plan(n)[0] == "direct":
        c, s = _rdft_mats(n, np.dtype(x.dtype))
        return _contract(x, c, -1), _contract(x, s, -1)
    re, im = _fft_last(x, None, -1)
    return re[..., :n // 2 + 1], im[..., :n // 2 + 1]


def _irfft_last(re, im, n):
    """Real inverse (unnormalised) of a half spectrum of n//2 + 1 values."""
    if _plan(n)[0] == "direct":
        c, s = _irdft_mats(n, np.dtype(re.dtype))
        return _add(_contract(re, c, -1), _contract(im, s, -1))
    m = n // 2 + 1
    tail = n - m  # X[n - k] = conj(X[k]) for k = 1 .. tail
    full_re = jnp.concatenate([re, jnp.flip(re[..., 1:tail + 1], -1)], axis=-1)
    full_im = None if im is None else jnp.concatenate([im, jnp.negative(jnp.flip(im[..., 1:tail + 1], -1))], axis=-1)
    out_re, _ = _fft_last(full_re, full_im, 1)
    return out_re


def _along(f, parts, axis):
    """f on parts moved so that axis is last, moved back."""
    nd = parts[0].ndim
    if axis in (-1, nd - 1):
        return f(*parts)
    mv = lambda v: None if v is None else jnp.moveaxis(v, axis, -1)
    out = f(*[mv(p) for p in parts])
    back = lambda v: None if v is None else jnp.moveaxis(v, -1, axis)
    return tuple(back(v) for v in out) if isinstance(out, tuple) else back(out)


# ---------------------------------------------------------------------------------
# podlet.lax.fft
# ---------------------------------------------------------------------------------
class FftType(enum.IntEnum):
    """jax.lax.FftType: which FFT lax.fft performs."""
    FFT = 0
    IFFT = 1
    RFFT = 2
    IRFFT = 3


def _fft_type(t):
    if isinstance(t, FftType):
        return t
    if isinstance(t, str):
        for name in ("FFT", "IFFT", "RFFT", "IRFFT"):
            if t in (name, name.lower()):
                return FftType[name]
        raise ValueError(f"Unknown FFT type '{t}'")
    raise TypeError(f"Unknown FFT type value '{t}'")


def _host_or_array(x):
    if isinstance(x, (_c.ComplexArray, Array, Tracer)):
        return x
    return jnp.asarray(x)


def _real_part_dtype(x):
    """float32 (float64 under x64) parts for x."""
    if isinstance(x, _c.ComplexArray):
        return np.dtype(x._re.dtype)
    d = np.dtype(x.dtype)
    return np.dtype(np.float64) if d == np.float64 else np.dtype(np.float32)


def lax_fft(x, fft_type, fft_lengths):
    """jax.lax.fft: FFT / IFFT (complex, IFFT normalised by 1 / prod(fft_lengths)), RFFT
    (real in, n//2 + 1 out on the last axis), IRFFT (the inverse, normalised) over the
    last len(fft_lengths) dimensions."""
    typ = _fft_type(fft_type)
    x = _host_or_array(x)
    fft_lengths = tuple(operator.index(n) for n in fft_lengths)
    pd = _real_part_dtype(x)
    if typ == FftType.RFFT:
        if isinstance(x, _c.ComplexArray):
            raise ValueError("only real valued inputs supported for rfft")
        x = x if x.dtype == pd else lax.convert_element_type(x, pd)
    elif not fft_lengths:
        x = _c._as_complex(x, _c.complex128 if pd == np.float64 else _c.complex64)
    if not fft_lengths:
        return x
    k = len(fft_lengths)
    shape = tuple(x.shape)
    if k > len(shape):
        raise ValueError(f"FFT input shape {shape} must have at least as many input dimensions as "
                         f"fft_lengths {fft_lengths}.")
    if typ == FftType.IRFFT:
        want = fft_lengths[:-1] + (fft_lengths[-1] // 2 + 1,)
        if shape[-k:] != want:
            raise ValueError(f"IRFFT input shape {shape} minor dimensions must be {want} for "
                             f"fft_lengths {fft_lengths} (the last one n // 2 + 1)")
    elif shape[-k:] != fft_lengths:
        raise ValueError(f"{typ.name} input shape {shape} minor dimensions must be equal to fft_lengths {fft_lengths}")
    if _bi.any(n < 1 for n in fft_lengths):
        raise ValueError(f"fft_lengths must be positive, got {fft_lengths}")
    nd = len(shape)
    axes = list(range(nd - k, nd))
    if typ == FftType.FFT or typ == FftType.IFFT:
        sign = -1 if typ == FftType.FFT else 1
        re, im = _c._parts(x, _c.complex128 if pd == np.float64 else _c.complex64)  # im None: a real input
        for ax in axes:
            re, im = _along(lambda r, i: _fft_last(r, i, sign), (re, im), ax)
        if typ == FftType.IFFT:
            scale = 1.0 / math.prod(fft_lengths)
            re, im = jnp.multiply(re, scale), jnp.multiply(im, scale)
        return _c.ComplexArray(re, im)
    if typ == FftType.RFFT:
        re, im = _rfft_last(x)
        for ax in axes[:-1]:
            re, im = _along(lambda r, i: _fft_last(r, i, -1), (re, im), ax)
        return _c.ComplexArray(re, im)
    if not isinstance(x, _c.ComplexArray):
        x = _c._as_complex(x, _c.complex128 if pd == np.float64 else _c.complex64)
    re, im = x._re, x._im
    for ax in axes[:-1]:
        re, im = _along(lambda r, i: _fft_last(r, i, 1), (re, im), ax)
    out = _irfft_last(re, im, fft_lengths[-1])
    return jnp.multiply(out, 1.0 / math.prod(fft_lengths))


# ---------------------------------------------------------------------------------
# podlet.numpy.fft: jax/_src/numpy/fft.py's structure
# ---------------------------------------------------------------------------------
def _norm_factor(s, func_name, norm):
    if norm == "backward":
        return 1.0
    if norm == "ortho":
        return math.sqrt(math.prod(s)) if func_name.startswith("i") else 1 / math.sqrt(math.prod(s))
    if norm == "forward":
        return float(math.prod(s)) if func_name.startswith("i") else 1 / math.prod(s)
    raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".')


def _scale(x, f):
    if f == 1.0:
        return x
    if isinstance(x, _c.ComplexArray):
        return _c.ComplexArray(jnp.multiply(x._re, f), jnp.multiply(x._im, f))
    return jnp.multiply(x, f)


def _fft_core(func_name, fft_type, a, s, axes, norm):
    full_name = f"jax.numpy.fft.{func_name}"
    arr = _host_or_array(a)
    if norm is not None and norm not in ("backward", "ortho", "forward"):
        _norm_factor((1,), func_name, norm)
    if s is not None:
        s = tuple(map(operator.index, s))
        if np.any(np.less_equal(s, 0)):
            raise ValueError(f"Shape should be positive, got s={s}.")
    if s is not None and axes is not None and len(s) != len(axes):
        raise ValueError(f"Shape and axes have different lengths: s={s}, axes={tuple(axes)}.")
    orig_axes = axes
    if axes is None:
        axes = range(arr.ndim) if s is None else range(arr.ndim - len(s), arr.ndim)
    axes = [operator.index(ax) for ax in axes]
    for ax in axes:
        if not -arr.ndim <= ax < arr.ndim:
            raise ValueError(f"{full_name}: axis {ax} is out of bounds for an array of dimension {arr.ndim}")
    if len(axes) != len({ax % arr.ndim for ax in axes}):
        raise ValueError(f"{full_name} does not support repeated axes. Got axes {tuple(axes)}.")
    if orig_axes is not None:
        new_axes = tuple(range(arr.ndim - len(axes), arr.ndim))
        arr = jnp.moveaxis(arr, tuple(axes), new_axes)
        axes = new_axes
    if s is not None:
        in_s = list(arr.shape)
        for axis, x in zip(axes, s):
            in_s[axis] = x
        if fft_type == FftType.IRFFT:
            in_s[-1] = in_s[-1] // 2 + 1
        arr = arr[tuple(slice(v) for v in in_s)]
        pads = [(0, x - y) for x, y in zip(in_s, arr.shape)]
        if _bi.any(p[1] for p in pads):
            arr = jnp.pad(arr, pads)
    else:
        if fft_type == FftType.IRFFT:
            s = [arr.shape[axis] for axis in axes[:-1]]
            if axes:
                s += [_bi.max(0, 2 * (arr.shape[axes[-1]] - 1))]
        else:
            s = [arr.shape[axis] for axis in axes]
        if _bi.any(v < 1 for v in s):
            raise ValueError(f"{full_name}: the transformed lengths {tuple(s)} must be positive "
                             f"(input shape {tuple(arr.shape)})")
    transformed = lax_fft(arr, fft_type, tuple(s))
    if norm is not None:
        transformed = _scale(transformed, _norm_factor(s, func_name, norm))
    if orig_axes is not None:
        transformed = jnp.moveaxis(transformed, axes, tuple(orig_axes))
    return transformed


def _axis_check_1d(func_name, axis):
    if isinstance(axis, (list, tuple)):
        full_name = f"jax.numpy.fft.{func_name}"
        raise ValueError(f"{full_name} does not support multiple axes. Please use {full_name}n. Got axis = {axis!r}.")


def _fft_core_1d(func_name, fft_type, a, n, axis, norm):
    _axis_check_1d(func_name, axis)
    return _fft_core(func_name, fft_type, a, None if n is None else [n], None if axis is None else [axis], norm)


def fft(a, n=None, axis=-1, norm=None):
    """jax.numpy.fft.fft: the 1-D discrete Fourier transform."""
    return _fft_core_1d("fft", FftType.FFT, a, n, axis, norm)


def ifft(a, n=None, axis=-1, norm=None):
    """jax.numpy.fft.ifft: the 1-D inverse discrete Fourier transform."""
    return _fft_core_1d("ifft", FftType.IFFT, a, n, axis, norm)


def rfft(a, n=None, axis=-1, norm=None):
    """jax.numpy.fft.rfft: the 1-D transform of a real input (n//2 + 1 outputs)."""
    return _fft_core_1d("rfft", FftType.RFFT, a, n, axis, norm)


def irfft(a, n=None, axis=-1, norm=None):
    """jax.numpy.fft.irfft: the inverse of rfft (a real output of length n, default 2(m - 1))."""
    return _fft_core_1d("irfft", FftType.IRFFT, a, n, axis, norm)


def hfft(a, n=None, axis=-1, norm=None):
    """jax.numpy.fft.hfft: the transform of a Hermitian-symmetric signal given by its
    first half (JAX's definition: irfft(conj(a), n, norm) * n)."""
    conj_a = jnp.conj(_host_or_array(a))
    _axis_check_1d("hfft", axis)
    nn = (conj_a.shape[axis] - 1) * 2 if n is None else n
    return jnp.multiply(_fft_core_1d("hfft", FftType.IRFFT, conj_a, n, axis, norm), float(nn))


def ihfft(a, n=None, axis=-1, norm=None):
    """jax.numpy.fft.ihfft: conj(rfft(a, n, norm)) / n."""
    _axis_check_1d("ihfft", axis)
    arr = _host_or_array(a)
    nn = arr.shape[axis] if n is None else n
    output = _fft_core_1d("ihfft", FftType.RFFT, arr, n, axis, norm)
    return _scale(jnp.conj(output), 1 / nn)


def _fft_core_2d(func_name, fft_type, a, s, axes, norm):
    if len(axes) != 2:
        raise ValueError(f"jax.numpy.fft.{func_name} only supports 2 axes. Got axes = {axes!r}.")
    return _fft_core(func_name, fft_type, a, s, axes, norm)


def fft2(a, s=None, axes=(-2, -1), norm=None):
    """jax.numpy.fft.fft2."""
    return _fft_core_2d("fft2", FftType.FFT, a, s, axes, norm)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    """jax.numpy.fft.ifft2."""
    return _fft_core_2d("ifft2", FftType.IFFT, a, s, axes, norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    """jax.numpy.fft.rfft2."""
    return _fft_core_2d("rfft2", FftType.RFFT, a, s, axes, norm)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    """jax.numpy.fft.irfft2."""
    return _fft_core_2d("irfft2", FftType.IRFFT, a, s, axes, norm)


def fftn(a, s=None, axes=None, norm=None):
    """jax.numpy.fft.fftn."""
    return _fft_core("fftn", FftType.FFT, a, s, axes, norm)


def ifftn(a, s=None, axes=None, norm=None):
    """jax.numpy.fft.ifftn."""
    return _fft_core("ifftn", FftType.IFFT, a, s, axes, norm)


def rfftn(a, s=None, axes=None, norm=None):
    """jax.numpy.fft.rfftn."""
    return _fft_core("rfftn", FftType.RFFT, a, s, axes, norm)


def irfftn(a, s=None, axes=None, norm=None):
    """jax.numpy.fft.irfftn."""
    return _fft_core("irfftn", FftType.IRFFT, a, s, axes, norm)


def _freq_args(name, n, d):
    if isinstance(n, (list, tuple)):
        raise ValueError(f"The n argument of jax.numpy.fft.{name} only takes an int. Got n = {list(n)}.")
    if isinstance(d, (list, tuple)):
        raise ValueError(f"The d argument of jax.numpy.fft.{name} only takes a single value. Got d = {list(d)}.")
    return operator.index(n)


def _over(k, d, n, dtype):
    if isinstance(d, (Array, Tracer)):
        return jnp.divide(jnp.asarray(k), jnp.astype(jnp.multiply(d, n), dtype))
    return jnp.divide(jnp.asarray(k), jnp.asarray(np.asarray(d * n, dtype)))


def fftfreq(n, d=1.0, *, dtype=None, device=None):
    """jax.numpy.fft.fftfreq: the sample frequencies [0, 1, ..., -1] / (d n)."""
    n = _freq_args("fftfreq", n, d)
    dtype = np.dtype(jnp.float32 if dtype is None else dtype)
    work = dtype if dtype.kind == "f" else np.dtype(np.float32)
    i = np.arange(n, dtype=np.int64)
    k = ((i + n // 2) % n - n // 2).astype(work)
    return jnp.astype(_over(k, d, n, work), dtype)


def rfftfreq(n, d=1.0, *, dtype=None, device=None):
    """jax.numpy.fft.rfftfreq: [0, 1, ..., n // 2] / (d n)."""
    n = _freq_args("rfftfreq", n, d)
    dtype = np.dtype(jnp.float32 if dtype is None else dtype)
    k = np.arange(0, n // 2 + 1).astype(dtype)
    return _over(k, d, n, dtype)


def fftshift(x, axes=None):
    """jax.numpy.fft.fftshift: the zero frequency moved to the centre."""
    x = _host_or_array(x)
    if axes is None:
        axes = tuple(range(x.ndim))
        shift = [dim // 2 for dim in x.shape]
    elif isinstance(axes, int):
        shift = x.shape[axes] // 2
    else:
        shift = [x.shape[ax] // 2 for ax in axes]
    return jnp.roll(x, shift, axes)


def ifftshift(x, axes=None):
    """jax.numpy.fft.ifftshift: the inverse of fftshift."""
    x = _host_or_array(x)
    if axes is None:
        axes = tuple(range(x.ndim))
        shift = [-(dim // 2) for dim in x.shape]
    elif isinstance(axes, int):
        shift = -(x.shape[axes] // 2)
    else:
        shift = [-(x.shape[ax] // 2) for ax in axes]
    return jnp.roll(x, shift, axes)


# ---------------------------------------------------------------------------------
# podlet.lax: fft, FftType, complex, real, imag, conj
# ---------------------------------------------------------------------------------
def lax_complex(x, y):
    """jax.lax.complex: x + i y from two real arrays of one float dtype."""
    x, y = _host_or_array(x), _host_or_array(y)
    if isinstance(x, _c.ComplexArray) or isinstance(y, _c.ComplexArray):
        raise TypeError("lax.complex takes two real arrays (real and imaginary parts), got a complex one")
    if x.dtype != y.dtype or np.dtype(x.dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"lax.complex requires two float32 or two float64 arrays, got {x.dtype} and {y.dtype}")
    if tuple(x.shape) != tuple(y.shape):
        raise TypeError(f"lax.complex requires arguments of one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    return _c.ComplexArray(x, y)


def _lax_part(name, f):
    def g(x):
        if not isinstance(x, _c.ComplexArray):
            raise TypeError(f"lax.{name} requires a complex array, got {getattr(x, 'dtype', type(x).__name__)}")
        return f(x)
    g.__name__ = g.__qualname__ = name
    g.__doc__ = f"jax.lax.{name} of a complex array."
    return g


def _register():
    """podlet.numpy is a module, not a package: make `import podlet.numpy.fft` work, and
    attach lax.fft / FftType / complex / real / imag / conj to podlet.lax (as
    _src/linalg.py attaches lax.linalg)."""
    sys.modules["podlet.numpy.fft"] = sys.modules[__name__]
    lax_fft.__name__ = lax_fft.__qualname__ = "fft"
    lax.fft = lax_fft
    lax.FftType = FftType
    lax.complex = lax_complex
    lax.real = _lax_part("real", lambda z: z._re)
    lax.imag = _lax_part("imag", lambda z: z._im)
    lax.conj = _lax_part("conj", lambda z: z.conj())


_register()
