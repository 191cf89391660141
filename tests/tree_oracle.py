"""Pytrees across the podlet / JAX boundary for oracle tests: convert a tree of arrays
either way, and compare a podlet tree with JAX's leaf by leaf (same structure, shapes and
dtypes; integers exactly, floats within a tolerance)."""
import numpy as np

import jax
import jax.numpy as jnp

import podlet.numpy as pnp
from podlet import tree_util as ptu


def to_podlet(tree):
    return ptu.tree_map(lambda x: pnp.asarray(np.asarray(x)), tree)


def to_jax(tree):
    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), tree)


def np_leaves(tree, lib):
    """The leaves as NumPy arrays; a typed JAX key becomes its raw uint32 data, which is
    how podlet stores a key."""
    leaves = ptu.tree_leaves(tree) if lib == "podlet" else jax.tree.leaves(tree)
    out = []
    for x in leaves:
        if lib == "jax" and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        out.append(np.asarray(x))
    return out


def assert_trees_close(p_tree, j_tree, rtol=1e-6, atol=1e-7, what=""):
    assert repr(ptu.tree_structure(p_tree)) == repr(jax.tree.structure(j_tree)), what
    for i, (a, b) in enumerate(zip(np_leaves(p_tree, "podlet"), np_leaves(j_tree, "jax"))):
        assert a.shape == b.shape and a.dtype == b.dtype, (what, i, a.shape, a.dtype, b.shape, b.dtype)
        if a.dtype.kind in "biu":
            np.testing.assert_array_equal(a, b, err_msg=f"{what} leaf {i}")
        else:
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{what} leaf {i}")
