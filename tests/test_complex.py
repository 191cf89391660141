"""Complex numbers (pairs of real arrays, podlet/_src/complex.py) against jax.numpy on the
same inputs: values, dtypes, weak types and shapes of the operators (both operand orders,
Python scalars) and of the podlet.numpy functions that accept complex values; jit, vmap,
pmap and tree_util with complex values; gradients of real functions through complex
intermediates against jax.grad and finite differences; the TypeError of every other
function; complex128 under x64 against NumPy."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import podlet
import podlet.numpy as pnp
from podlet import lax as plax
from podlet._src.complex import ComplexArray

rng = np.random.default_rng(0)
Z34 = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np.complex64)
Z43 = (rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))).astype(np.complex64)
Z4 = (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64)
F34 = rng.standard_normal((3, 4)).astype(np.float32)
F4 = rng.standard_normal(4).astype(np.float32)
I34 = rng.integers(-3, 4, (3, 4)).astype(np.int32)
BF34 = F34.astype(jnp.bfloat16)
# sort_complex ties on the real part, zeros and a negative real axis for sqrt / log / angle
ZS = np.array([1 + 2j, -1 + 0j, 1 - 1j, 0j, -4 + 0.5j, 2.5 - 3j, -0.5 - 0.5j, 1 + 0j], np.complex64)


def _p(v):
    return pnp.asarray(v) if isinstance(v, np.ndarray) else v


def _j(v):
    return jnp.asarray(v) if isinstance(v, np.ndarray) else v


def _check(got, want, what, rtol=2e-6, atol=2e-6, weak=True):
    if isinstance(want, (list, tuple)):
        for g, w in zip(got, want):
            _check(g, w, what, rtol, atol, weak)
        return
    want_dtype = np.dtype(want.dtype)
    assert np.dtype(got.dtype) == want_dtype, f"{what}: dtype {got.dtype} != jax {want_dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {got.shape} != jax {want.shape}"
    if weak:
        assert bool(getattr(got, "weak_type", False)) == bool(want.weak_type), \
            f"{what}: weak_type {getattr(got, 'weak_type', False)} != jax {want.weak_type}"
    g, w = np.asarray(got), np.asarray(want)
    if want_dtype == np.bool_:
        np.testing.assert_array_equal(g, w, err_msg=what)
    else:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=what)


def test_dtype_names_and_predicates():
    assert pnp.complex64 is np.complex64 and pnp.csingle is np.complex64
    assert pnp.complex128 is np.complex128 and pnp.cdouble is np.complex128 and pnp.complex_ is np.complex128
    assert pnp.complexfloating is np.complexfloating
    assert pnp.issubdtype(pnp.complex64, pnp.complexfloating) and not pnp.issubdtype(pnp.float32, pnp.complexfloating)
    z = pnp.asarray(Z34)
    assert z.dtype == pnp.complex64 and z.dtype == np.dtype("complex64")
    assert pnp.iscomplexobj(z) and not pnp.isrealobj(z) and not pnp.iscomplexobj(pnp.asarray(F34))
    assert pnp.result_type(pnp.float32, pnp.complex64) == jnp.result_type(jnp.float32, jnp.complex64)
    assert pnp.promote_types(pnp.int32, pnp.complex64) == jnp.promote_types(jnp.int32, jnp.complex64)
    assert pnp.result_type(z, 1.0) == np.complex64 and pnp.result_type(pnp.asarray(F34), 1j) == np.complex64


def test_array_attributes_and_conversions():
    z = pnp.asarray(Z34)
    assert isinstance(z, ComplexArray)
    assert z.shape == (3, 4) and z.ndim == 2 and z.size == 12 and len(z) == 3
    np.testing.assert_array_equal(np.asarray(z), Z34)
    np.testing.assert_array_equal(np.asarray(z.real), Z34.real)
    np.testing.assert_array_equal(np.asarray(z.imag), Z34.imag)
    np.testing.assert_array_equal(np.asarray(z.conj()), Z34.conj())
    np.testing.assert_array_equal(np.asarray(z.T), Z34.T)
    np.testing.assert_array_equal(np.asarray(z.reshape(4, 3)), Z34.reshape(4, 3))
    np.testing.assert_array_equal(np.asarray(z.reshape((2, 6))), Z34.reshape(2, 6))
    np.testing.assert_array_equal(np.asarray(z.transpose()), Z34.T)
    np.testing.assert_array_equal(np.asarray(z[1]), Z34[1])
    np.testing.assert_array_equal(np.asarray(z[..., ::2]), Z34[..., ::2])
    np.testing.assert_array_equal(np.asarray(z[np.array([2, 0])]), Z34[[2, 0]])
    assert np.asarray(z).dtype == np.complex64
    assert repr(pnp.asarray(np.array([1 + 2j], np.complex64))) == repr(jnp.asarray(np.array([1 + 2j], np.complex64)))
    assert complex(z[0, 0]) == complex(Z34[0, 0]) and z[0, 0].item() == Z34[0, 0].item()
    # creation
    _check(pnp.asarray(1 + 2j), jnp.asarray(1 + 2j), "asarray(python complex)")
    _check(pnp.asarray([1j, 2]), jnp.asarray([1j, 2]), "asarray(list)")
    _check(pnp.array(Z4), jnp.array(Z4), "array")
    _check(pnp.asarray(F34, dtype=pnp.complex64), jnp.asarray(F34, dtype=jnp.complex64), "asarray(real, complex64)")
    _check(pnp.asarray([pnp.asarray(Z4), pnp.asarray(F4)]), jnp.asarray([jnp.asarray(Z4), jnp.asarray(F4)]),
           "asarray(list of arrays)")
    _check(pnp.zeros((2, 3), pnp.complex64), jnp.zeros((2, 3), jnp.complex64), "zeros")
    _check(pnp.ones(3, dtype=pnp.complex64), jnp.ones(3, dtype=jnp.complex64), "ones")
    _check(pnp.full((2,), 1 - 2j), jnp.full((2,), 1 - 2j), "full weak")
    _check(pnp.full((2, 2), 3, pnp.complex64), jnp.full((2, 2), 3, jnp.complex64), "full dtype")
    _check(pnp.zeros_like(pnp.asarray(Z34)), jnp.zeros_like(Z34), "zeros_like")
    _check(pnp.ones_like(pnp.asarray(Z34)), jnp.ones_like(Z34), "ones_like")
    _check(pnp.zeros_like(pnp.asarray(F34), dtype=pnp.complex64), jnp.zeros_like(F34, dtype=jnp.complex64),
           "zeros_like(real, complex64)")
    _check(pnp.astype(pnp.asarray(F34), pnp.complex64), jnp.astype(F34, jnp.complex64), "astype real->complex")
    _check(pnp.asarray(F34).astype(pnp.complex64), jnp.asarray(F34).astype(jnp.complex64), "method astype")
    _check(pnp.asarray(I34).astype(pnp.complex64), jnp.asarray(I34).astype(jnp.complex64), "int astype")
    with pytest.warns(np.exceptions.ComplexWarning):
        r = pnp.asarray(Z34).astype(pnp.float32)
    np.testing.assert_array_equal(np.asarray(r), Z34.real)
    with pytest.warns(np.exceptions.ComplexWarning):
        r = pnp.asarray(Z34, dtype=pnp.float32)
    np.testing.assert_array_equal(np.asarray(r), Z34.real)


OPERANDS = {"Z34": Z34, "Z4": Z4, "F34": F34, "F4": F4, "I34": I34, "BF34": BF34, "1j": 1j, "2.5-1j": 2.5 - 1j,
            "2.0": 2.0, "3": 3, "np.complex64": np.complex64(1 - 1j), "np.float32": np.float32(0.5)}
PAIRS = [("Z34", "Z34"), ("Z34", "Z4"), ("Z34", "F34"), ("F34", "Z34"), ("Z4", "F34"), ("Z34", "I34"),
         ("I34", "Z34"), ("BF34", "Z34"), ("Z34", "1j"), ("1j", "Z34"), ("F34", "1j"), ("1j", "F34"),
         ("I34", "2.5-1j"), ("2.5-1j", "I34"), ("BF34", "1j"), ("Z34", "2.0"), ("2.0", "Z34"), ("3", "Z4"),
         ("Z4", "3"), ("Z34", "np.complex64"), ("np.float32", "Z34"), ("F4", "np.complex64")]
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
       "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("left,right", PAIRS)
def test_operators_like_jax(op, left, right):
    a, b = OPERANDS[left], OPERANDS[right]
    if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray):
        pytest.fail("each pair needs an array")
    f = OPS[op]
    want = f(_j(a), _j(b))
    _check(f(_p(a), _p(b)), want, f"{left} {op} {right}", rtol=1e-5, atol=1e-6)
    _check(getattr(pnp, {"+": "add", "-": "subtract", "*": "multiply", "/": "divide", "==": "equal",
                         "!=": "not_equal"}[op])(_p(a), _p(b)), want, f"function {op}", rtol=1e-5, atol=1e-6)


def test_unary_operators_and_integer_powers():
    z = pnp.asarray(Z34)
    _check(-z, -jnp.asarray(Z34), "neg")
    _check(+z, +jnp.asarray(Z34), "pos")
    _check(abs(z), abs(jnp.asarray(Z34)), "abs()")
    for e in (0, 1, 2, 3, 5, -1, -2):
        _check(z ** e, jnp.asarray(Z34) ** e, f"z ** {e}", rtol=1e-5, atol=1e-6)
        _check(pnp.power(z, e), jnp.power(jnp.asarray(Z34), e), f"power(z, {e})", rtol=1e-5, atol=1e-6)
    _check(pnp.square(z), jnp.square(jnp.asarray(Z34)), "square", rtol=1e-6)
    _check(pnp.reciprocal(z), jnp.reciprocal(jnp.asarray(Z34)), "reciprocal", rtol=1e-6)
    _check(z @ pnp.asarray(Z43), jnp.asarray(Z34) @ jnp.asarray(Z43), "@", rtol=1e-5, atol=1e-6)
    _check(pnp.asarray(F34) @ pnp.asarray(Z43), jnp.asarray(F34) @ jnp.asarray(Z43), "real @ complex", rtol=1e-5,
           atol=1e-6)
    # division by a complex with a tiny / huge part (Smith's scaling keeps it finite)
    big = pnp.asarray(np.array([1e30 + 1e30j, 1e-30 + 2e-30j], np.complex64))
    _check(pnp.asarray(np.array([1 + 1j, 1 - 1j], np.complex64)) / big,
           jnp.asarray(np.array([1 + 1j, 1 - 1j], np.complex64)) / jnp.asarray(np.asarray(big)), "scaled division",
           rtol=1e-5)


FUNCS = [
    ("real", lambda m, z: m.real(z)), ("imag", lambda m, z: m.imag(z)), ("conj", lambda m, z: m.conj(z)),
    ("conjugate", lambda m, z: m.conjugate(z)), ("angle", lambda m, z: m.angle(z)),
    ("angle deg", lambda m, z: m.angle(z, deg=True)), ("abs", lambda m, z: m.abs(z)),
    ("absolute", lambda m, z: m.absolute(z)), ("iscomplex", lambda m, z: m.iscomplex(z)),
    ("isreal", lambda m, z: m.isreal(z)), ("isfinite", lambda m, z: m.isfinite(z)),
    ("exp", lambda m, z: m.exp(z)), ("log", lambda m, z: m.log(z)), ("sqrt", lambda m, z: m.sqrt(z)),
    ("sort_complex", lambda m, z: m.sort_complex(z)), ("sum", lambda m, z: m.sum(z)),
    ("sum axis keepdims", lambda m, z: m.sum(z.reshape(2, 4), axis=1, keepdims=True)),
    ("mean", lambda m, z: m.mean(z.reshape(2, 4), axis=0)), ("prod", lambda m, z: m.prod(z)),
    ("prod axis", lambda m, z: m.prod(z.reshape(2, 4), axis=1)), ("cumsum", lambda m, z: m.cumsum(z)),
    ("dot", lambda m, z: m.dot(z, z[::-1])), ("vdot", lambda m, z: m.vdot(z, z[::-1])),
    ("matmul", lambda m, z: m.matmul(z.reshape(2, 4), z.reshape(4, 2))),
    ("einsum", lambda m, z: m.einsum("ij,jk->ik", z.reshape(2, 4), z.reshape(4, 2))),
    ("einsum real", lambda m, z: m.einsum("i,i->", z, m.real(z))),
    ("where", lambda m, z: m.where(m.real(z) > 0, z, 2j)),
    ("concatenate", lambda m, z: m.concatenate([z, m.real(z)])), ("stack", lambda m, z: m.stack([z, z * 2], axis=1)),
    ("reshape", lambda m, z: m.reshape(z, (2, 2, 2))), ("transpose", lambda m, z: m.transpose(z.reshape(2, 4))),
    ("moveaxis", lambda m, z: m.moveaxis(z.reshape(2, 1, 4), 0, -1)),
    ("expand_dims", lambda m, z: m.expand_dims(z, 1)), ("squeeze", lambda m, z: m.squeeze(z.reshape(1, 8))),
    ("zeros_like", lambda m, z: m.zeros_like(z)), ("ones_like", lambda m, z: m.ones_like(z)),
    ("isclose", lambda m, z: m.isclose(z, z + 1e-6j)), ("isclose far", lambda m, z: m.isclose(z, z + 1e-2)),
    ("allclose", lambda m, z: m.allclose(z, z * (1 + 1e-7))), ("allclose no", lambda m, z: m.allclose(z, m.conj(z))),
    ("roll", lambda m, z: m.roll(z, 3)), ("flip", lambda m, z: m.flip(z)),
    ("sqrt of real->complex", lambda m, z: m.sqrt(m.real(z) + 0j)),
]


@pytest.mark.parametrize("name,f", FUNCS, ids=[n for n, _ in FUNCS])
def test_functions_like_jax(name, f):
    want = f(jnp, jnp.asarray(ZS))
    _check(f(pnp, pnp.asarray(ZS)), want, name, rtol=2e-6, atol=1e-6)
    _check(podlet.jit(lambda z: f(pnp, z))(pnp.asarray(ZS)), want, name + " under jit", rtol=2e-6, atol=1e-6,
           weak=False)


def test_sort_complex_of_real_input_is_complex():
    _check(pnp.sort_complex(pnp.asarray(F4)), jnp.sort_complex(F4), "sort_complex(real)")
    _check(pnp.sort_complex(pnp.asarray(Z34)), jnp.sort_complex(Z34), "sort_complex 2-D (last axis)")


def test_jit_vmap_pmap_and_tree_util():
    z = pnp.asarray(Z34)
    f = podlet.jit(lambda a, b: (a * b + 1j, pnp.abs(a)))
    out, mag = f(z, pnp.asarray(F34))
    np.testing.assert_allclose(np.asarray(out), Z34 * F34 + 1j, rtol=1e-6)
    assert isinstance(out, ComplexArray) and out.dtype == np.complex64
    np.testing.assert_allclose(np.asarray(mag), np.abs(Z34), rtol=1e-6)
    # vmap over a complex input and a complex output, in_axes / out_axes on the pair
    v = podlet.vmap(lambda a: pnp.sum(a * pnp.conj(a)), in_axes=1)(z)
    np.testing.assert_allclose(np.asarray(v), np.sum(Z34 * Z34.conj(), axis=0), rtol=1e-6)
    v2 = podlet.vmap(lambda a: a * 2j, out_axes=1)(z)
    np.testing.assert_allclose(np.asarray(v2), (Z34 * 2j).T, rtol=1e-6)
    # pmap over the device axis
    n = podlet.local_device_count()
    zz = (rng.standard_normal((n, 3)) + 1j * rng.standard_normal((n, 3))).astype(np.complex64)
    p = podlet.pmap(lambda a: pnp.exp(a))(pnp.asarray(zz))
    assert isinstance(p, ComplexArray)
    np.testing.assert_allclose(np.asarray(p), np.exp(zz), rtol=1e-5)
    # control flow: a complex carry through scan, complex branches of cond
    xs = rng.standard_normal((5, 4)).astype(np.float32)
    carry, ys = plax.scan(lambda c, x: (c * (1 + 0.5j) + x, pnp.abs(c)), pnp.asarray(Z4), pnp.asarray(xs))
    c_np, ys_np = Z4.astype(np.complex128), []
    for x in xs:
        ys_np.append(np.abs(c_np))
        c_np = c_np * (1 + 0.5j) + x
    np.testing.assert_allclose(np.asarray(carry), c_np, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ys), np.array(ys_np), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(plax.cond(False, lambda a: a * 2, lambda a: a.conj(), pnp.asarray(Z4))),
                               Z4.conj())
    # indexed updates, part by part
    za = pnp.asarray(Z4)
    _check(za.at[1].set(2 - 1j), jnp.asarray(Z4).at[1].set(2 - 1j), "at.set")
    _check(za.at[np.array([0, 0, 3])].add(1j), jnp.asarray(Z4).at[np.array([0, 0, 3])].add(1j), "at.add")
    _check(za.at[2:].set(pnp.asarray(F4[:2])), jnp.asarray(Z4).at[2:].set(F4[:2]), "at.set real")
    _check(za.at[1:3].get(), jnp.asarray(Z4).at[1:3].get(), "at.get")
    # tree_util: two children, round trip
    leaves, tree = podlet.tree_util.tree_flatten({"z": z, "x": pnp.asarray(F4)})
    assert len(leaves) == 3
    back = podlet.tree_util.tree_unflatten(tree, leaves)
    np.testing.assert_array_equal(np.asarray(back["z"]), Z34)
    doubled = podlet.tree_util.tree_map(lambda t: t * 2, z)
    np.testing.assert_array_equal(np.asarray(doubled), Z34 * 2)


def _grad_pair(f):
    x = rng.standard_normal(6).astype(np.float32)
    return np.asarray(podlet.grad(f(pnp))(x)), np.asarray(jax.grad(f(jnp))(x)), x


GRADS = {
    "abs2 of a complex product": lambda m: lambda x: m.sum(m.abs(x * (1 + 2j) + m.exp(1j * x)) ** 2),
    "real of z**3": lambda m: lambda x: m.sum(m.real((x + 0.5j) ** 3)),
    "angle": lambda m: lambda x: m.sum(m.angle(x + 1j * m.flip(x) + 0.1j)),
    "log and sqrt": lambda m: lambda x: m.sum(m.imag(m.log(x + 2j)) + m.real(m.sqrt(x - 1j))),
    "division": lambda m: lambda x: m.sum(m.real((x + 1j) / (x[::-1] - 2j))),
    "matmul": lambda m: lambda x: m.abs(m.vdot(x + 1j, m.exp(1j * x))),
}


@pytest.mark.parametrize("name", list(GRADS))
def test_grad_through_complex_like_jax(name):
    got, want, _ = _grad_pair(GRADS[name])
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=name)


def test_grad_of_abs_at_zero_like_jax():
    x = np.float32([0.0, 1.5, -2.0, 0.0])
    f = lambda m: lambda v: m.sum(m.abs(v * (1 - 1j)) + m.abs(v + 0j))
    np.testing.assert_array_equal(np.asarray(podlet.grad(f(pnp))(x)), np.asarray(jax.grad(f(jnp))(x)))


def test_grad_finite_differences_float64():
    podlet.config.update("jax_enable_x64", True)
    try:
        f = GRADS["abs2 of a complex product"](pnp)
        x = rng.standard_normal(6)
        g = np.asarray(podlet.grad(f)(pnp.asarray(x)))
        assert g.dtype == np.float64
        d = rng.standard_normal(6)
        eps = 1e-6
        fd = (float(f(pnp.asarray(x + eps * d))) - float(f(pnp.asarray(x - eps * d)))) / (2 * eps)
        np.testing.assert_allclose(g @ d, fd, rtol=1e-7)
    finally:
        podlet.config.update("jax_enable_x64", False)


def test_grad_of_a_complex_input_is_conjugated_like_jax():
    z = np.array([3 + 4j, -1 + 0.5j], np.complex64)
    f = lambda m: lambda a: m.sum(m.abs(a) ** 2 + m.real(a * (2 - 1j)))
    g = podlet.grad(f(pnp))(pnp.asarray(z))
    assert isinstance(g, ComplexArray)
    np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(f(jnp))(jnp.asarray(z))), rtol=1e-6)


def test_complex128_under_x64_against_numpy():
    podlet.config.update("jax_enable_x64", True)
    try:
        z = (rng.standard_normal(5) + 1j * rng.standard_normal(5))
        pz = pnp.asarray(z)
        assert pz.dtype == np.complex128 and pz.real.dtype == np.float64
        np.testing.assert_allclose(np.asarray(pnp.exp(pz) * pz / (pz + 1)), np.exp(z) * z / (z + 1), rtol=1e-14)
        np.testing.assert_allclose(np.asarray(pnp.sqrt(pz)), np.sqrt(z), rtol=1e-14)
        assert (pnp.asarray(z.astype(np.complex64)) + pnp.asarray(np.ones(5))).dtype == np.complex128
        assert (pnp.asarray(z.astype(np.complex64)) + 1.0).dtype == np.complex64
    finally:
        podlet.config.update("jax_enable_x64", False)
    assert pnp.asarray(z).dtype == np.complex64  # canonicalised without x64, as in JAX


def test_lax_complex_parts():
    c = plax.complex(pnp.asarray(F4), pnp.asarray(F4 * 2))
    _check(c, jax.lax.complex(F4, F4 * 2), "lax.complex")
    _check(plax.real(c), jax.lax.real(jax.lax.complex(F4, F4 * 2)), "lax.real")
    _check(plax.imag(c), jax.lax.imag(jax.lax.complex(F4, F4 * 2)), "lax.imag")
    _check(plax.conj(c), jax.lax.conj(jax.lax.complex(F4, F4 * 2)), "lax.conj")
    with pytest.raises(TypeError, match="float32 or two float64"):
        plax.complex(pnp.asarray(F4), pnp.asarray(I34[0]))
    with pytest.raises(TypeError, match="one shape"):
        plax.complex(pnp.asarray(F4), pnp.asarray(F34))
    with pytest.raises(TypeError, match="lax.real requires a complex array"):
        plax.real(pnp.asarray(F4))


def test_unsupported_uses_raise_clear_errors():
    z = pnp.asarray(Z34)
    with pytest.raises(TypeError, match=r"podlet.numpy.sin does not support complex inputs"):
        pnp.sin(z)
    with pytest.raises(TypeError, match=r"podlet.numpy.maximum does not support complex inputs"):
        pnp.maximum(pnp.asarray(F34), 1j)
    with pytest.raises(TypeError, match=r"podlet.numpy.arange does not support complex inputs"):
        pnp.arange(3, dtype=pnp.complex64)
    with pytest.raises(TypeError, match=r"podlet.numpy.tanh does not support complex inputs"):
        pnp.tanh(Z34)  # a NumPy complex array too
    with pytest.raises(TypeError, match=r"podlet.numpy.linalg.inv does not support complex inputs"):
        pnp.linalg.inv(pnp.asarray(Z34[:, :3]))
    with pytest.raises(TypeError, match="integer exponents"):
        z ** 0.5
    with pytest.raises(TypeError, match="complex arrays do not support this operator"):
        z < z
    with pytest.raises(TypeError, match="can't convert complex to float"):
        float(z[0, 0])
    with pytest.raises(TypeError, match="drop the imaginary part"):
        pnp.sum(z, dtype=pnp.float32)
    with pytest.raises(TypeError, match="grad requires real-valued outputs"):
        podlet.grad(lambda x: pnp.sum(x * 1j))(F4)
    with pytest.raises(TypeError, match="cannot be used as an index"):
        z[z]
