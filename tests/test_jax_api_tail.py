"""Issue 26's long tail of ``jax`` / ``jax.tree_util`` / ``flax.jax_utils`` names
against jax 0.10.2 and flax: the same inputs give the same values, structures, printed
output and kinds of error."""

import collections
import dataclasses
import functools

import numpy as np
import pytest

import jax
import jax.numpy as jnp
import jax.tree_util as jtu

import podlet
import podlet.numpy as pnp
from podlet import tree_util as ptu

Pair = collections.namedtuple("Pair", ["x", "y"])


def _both(fn):
    """fn(tu) with each library's tree_util: (jax result, podlet result)."""
    return fn(jtu), fn(ptu)


def _err(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the kind and message are the point
        return type(e), str(e)
    return None


# ------------------------------------------------------------------ tree_util

@pytest.mark.parametrize("tree", [
    {"b": [1, 2], "a": (3,)}, [1, (2, None)], None, Pair(1, [2]),
    (1, 2), collections.OrderedDict(b=1, a=2), collections.defaultdict(list, {"z": 1, "y": 2}),
])
def test_flatten_one_level(tree):
    j, p = _both(lambda tu: tu.flatten_one_level(tree))
    assert j == p and type(j[0]) is type(p[0])
    j, p = _both(lambda tu: tu.flatten_one_level_with_keys(tree))
    if isinstance(tree, Pair):  # jax 0.10.2 repeats the first field's key
        assert [c for _, c in j[0]] == [c for _, c in p[0]] and j[1] == p[1]
        assert [k for k, _ in p[0]] == [k for k, _ in ptu.tree_flatten_with_path(
            tree, is_leaf=lambda x: x is not tree)[0] for k in k]
    else:
        assert str(j) == str(p) and type(j[0]) is type(p[0])
    assert jtu.default_registry.flatten_one_level(tree) is not None
    assert str(jtu.default_registry.flatten_one_level(tree)) == str(
        ptu.default_registry.flatten_one_level(tree))


def test_flatten_one_level_of_a_leaf():
    for name in ("flatten_one_level", "flatten_one_level_with_keys"):
        j, p = _both(lambda tu: _err(lambda: getattr(tu, name)(1.5)))
        assert j == p == (ValueError, "can't tree-flatten type: <class 'float'>")
        assert getattr(ptu.default_registry, name)(1.5) is None
        assert getattr(jtu.default_registry, name)(1.5) is None


def test_is_tree_node_and_registry():
    for t in (list, tuple, dict, type(None), Pair, collections.OrderedDict, int, float,
              str, np.ndarray, jtu.Partial):
        pt = ptu.Partial if t is jtu.Partial else t
        assert jtu.is_tree_node(t) == ptu.is_tree_node(pt) == ptu.default_registry.is_node(pt), t
    tree = [1, {"a": (2, None), "b": Pair(3, 4)}]
    jl, jd = jtu.default_registry.flatten(tree)
    pl, pd = ptu.default_registry.flatten(tree)
    assert jl == pl and str(jd) == str(pd)
    assert ptu.KeyPath == tuple[ptu.KeyEntry, ...]
    assert repr(ptu.KeyEntry) == repr(jtu.KeyEntry) == "~KeyEntry"


def _dataclass_types():
    out = []
    for tu in (jtu, ptu):
        @tu.register_dataclass
        @dataclasses.dataclass
        class S:
            x: object
            y: object
            op: str = dataclasses.field(default="add", metadata=dict(static=True))
        out.append(S)
    return out


def test_register_dataclass():
    JS, PS = _dataclass_types()
    j, p = JS(1, [2, 3]), PS(1, [2, 3])
    assert str(jtu.tree_structure(j)) == str(ptu.tree_structure(p)).replace("PS", "S")
    assert str(jtu.tree_flatten_with_path(j)[0]) == str(ptu.tree_flatten_with_path(p)[0])
    assert ptu.tree_map(lambda v: v * 10, p) == PS(10, [20, 30])
    assert jtu.tree_map(lambda v: v * 10, j).y == [20, 30]
    assert ptu.tree_structure(PS(1, 2, "sub")) != ptu.tree_structure(p)
    # the static field is node data under jit: one trace per value
    traces = []

    @podlet.jit
    def f(s):
        traces.append(s.op)
        return s.x + s.y if s.op == "add" else s.x - s.y

    assert float(f(PS(pnp.float32(3), pnp.float32(1)))) == 4.0
    assert float(f(PS(pnp.float32(3), pnp.float32(1), "sub"))) == 2.0
    assert traces == ["add", "sub"]


def test_register_dataclass_errors():
    @dataclasses.dataclass
    class D:
        x: object
        y: object

    class NotDC:
        def __init__(self, a, b):
            self.a, self.b = a, b

    cases = [
        lambda tu: tu.register_dataclass(NotDC),
        lambda tu: tu.register_dataclass(D, data_fields=["x"]),
        lambda tu: tu.register_dataclass(D, data_fields=["x"], meta_fields=[]),
        lambda tu: tu.register_dataclass(D, data_fields=["x", "y", "z"], meta_fields=[]),
        lambda tu: tu.register_dataclass(D, data_fields=["x", "y"], meta_fields=["x"]),
    ]
    for case in cases:
        j, p = _both(lambda tu: _err(lambda: case(tu)))
        assert j == p and j is not None
    JS, PS = _dataclass_types()
    j, p = _err(lambda: jtu.register_dataclass(JS)), _err(lambda: ptu.register_dataclass(PS))
    assert j[0] is p[0] is ValueError and j[1].replace("JS", "S") == p[1].replace("PS", "S")
    # a plain class with explicit fields
    for tu in (jtu, ptu):
        class NC(NotDC):
            pass
        tu.register_dataclass(NC, data_fields=["a"], meta_fields=["b"])
        out = tu.tree_map(lambda v: v + 1, NC(1, "z"))
        assert (out.a, out.b) == (2, "z")
        assert str(tu.tree_structure(NC(1, "z"))) == "PyTreeDef(CustomNode(NC[('z',)], [*]))"


def test_register_static():
    types_ = []
    for tu in (jtu, ptu):
        @tu.register_static
        class StaticStr(str):
            pass
        types_.append(StaticStr)
        tree = [StaticStr("add"), 1]
        assert tu.tree_leaves(tree) == [1]
        assert str(tu.tree_structure(tree)) == "PyTreeDef([CustomNode(StaticStr[add], []), *])"
        assert str(tu.flatten_one_level_with_keys(StaticStr("a"))) == "([], 'a')"

    @podlet.jit
    def f(x, y, s):
        return x + y if s == "add" else x - y

    assert float(f(pnp.float32(1), pnp.float32(2), types_[1]("add"))) == 3.0
    assert float(f(pnp.float32(1), pnp.float32(2), types_[1]("sub"))) == -1.0


def test_partial():
    def fn(a, b, c=0):
        return a + 2 * b + 3 * c

    j, p = jtu.Partial(fn, 1, c=5), ptu.Partial(fn, 1, c=5)
    assert str(jtu.tree_structure(j)) == str(ptu.tree_structure(p))
    assert jtu.tree_leaves(j) == ptu.tree_leaves(p) == [1, 5]
    assert j(2) == p(2) == 20 and repr(j) == repr(p)
    assert ptu.tree_map(lambda v: v * 2, p)(2) == jtu.tree_map(lambda v: v * 2, j)(2)
    # a partial's own arguments stay out of the pytree
    inner = functools.partial(fn, 10)
    j, p = jtu.Partial(inner, 3), ptu.Partial(inner, 3)
    assert jtu.tree_leaves(j) == ptu.tree_leaves(p) == [3] and j() == p() == 16
    assert p.func == inner and p.args == (3,)
    # passable to jit: the bound arrays are traced, the function is static
    call = podlet.jit(lambda g, x: g(x))
    got = call(ptu.Partial(pnp.multiply, pnp.arange(3.0)), pnp.float32(2))
    want = jax.jit(lambda g, x: g(x))(jtu.Partial(jnp.multiply, jnp.arange(3.0)), 2.0)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_tree_broadcast():
    cases = [([1, {"a": 2}], [[3, 4], {"a": (5, 6)}]), (1, {"a": [2, 3]}),
             ({"x": None, "y": 0}, {"x": None, "y": [1, 2]})]
    for prefix, full in cases:
        j, p = _both(lambda tu: tu.tree_broadcast(prefix, full))
        assert j == p
    j, p = _both(lambda tu: tu.tree_broadcast([1, [2]], [[3], (4,)], is_leaf=lambda x: x == [2]))
    assert j == p
    j, p = _both(lambda tu: _err(lambda: tu.tree_broadcast([1, 2], [3, 4, 5])))
    assert j == p and j[0] is ValueError


def test_tree_reduce_associative():
    show = lambda a, b: f"({a}+{b})"  # noqa: E731
    for tree in ([1, 2, 3, 4, 5], {"a": 1}, [[1], (2, 3)], ["a", "b", "c"]):
        j, p = _both(lambda tu: tu.tree_reduce_associative(show, tree))
        assert j == p
    j, p = _both(lambda tu: tu.tree_reduce_associative(
        lambda a, b: a + b, [(1,), [(2,)]], is_leaf=lambda x: isinstance(x, tuple)))
    assert j == p == (1, 2)
    j, p = _both(lambda tu: tu.tree_reduce_associative(lambda a, b: a + b, [], identity=0))
    assert j == p == 0
    j, p = _both(lambda tu: _err(lambda: tu.tree_reduce_associative(lambda a, b: a + b, [])))
    assert j == p and j[0] is TypeError


def test_tree_transpose():
    tree = [{"a": 1, "b": 2}, {"a": 3, "b": 4}, {"a": 5, "b": 6}]
    for inner in (True, False):
        j, p = _both(lambda tu: tu.tree_transpose(
            tu.tree_structure([0, 0, 0]),
            tu.tree_structure({"a": 0, "b": 0}) if inner else None, tree))
        assert j == p == {"a": [1, 3, 5], "b": [2, 4, 6]}
    j, p = _both(lambda tu: tu.tree_transpose(
        tu.tree_structure(Pair(0, 0)), tu.tree_structure((0, [0])), Pair((1, [2]), (3, [4]))))
    assert j == p
    j, p = _both(lambda tu: _err(lambda: tu.tree_transpose(
        tu.tree_structure([0, 0]), tu.tree_structure({"a": 0, "b": 0}),
        [{"a": 1, "b": 2}, {"a": 3}])))
    assert j == p and j[0] is TypeError
    o, i = ptu.tree_structure([0, (0, 0)]), ptu.tree_structure({"k": 0})
    assert str(o.compose(i)) == str(jtu.tree_structure([0, (0, 0)]).compose(
        jtu.tree_structure({"k": 0})))


# ------------------------------------------------------------ debug.print / callback

def _debug_program(lib, jnp_):
    """Runs the same debug.print / callback program with one library; returns nothing
    (the test reads stdout)."""
    def f(x):
        lib.debug.print("x={x} s={}", x.sum(), x=x)
        lib.debug.callback(lambda a: print("cb", np.asarray(a)), x * 2)
        return x + 1

    print("eager")
    f(jnp_.arange(3.0))
    print("jit")
    g = lib.jit(f)
    g(jnp_.arange(3.0))
    g(jnp_.arange(3.0) + 1)  # once per execution, this execution's values
    print("nested jit")
    lib.jit(lambda x: lib.jit(f)(x) * 2)(jnp_.arange(2.0))
    print("vmap")
    lib.vmap(f)(jnp_.arange(4.0).reshape(2, 2))
    print("grad")
    lib.grad(lambda x: f(x).sum())(jnp_.arange(2.0))
    print("jit of value_and_grad")
    lib.jit(lib.value_and_grad(lambda x: f(x).sum()))(jnp_.arange(2.0))
    print("vjp")
    lib.vjp(f, jnp_.arange(2.0))[1](jnp_.ones(2))
    lib.debug.print("{a:.2f} {b} {c}", a=jnp_.float32(1.234), b=3, c="static")
    lib.debug.print(ordered=True)("two-call {}", jnp_.arange(2))
    lib.jit(lambda: lib.debug.print("const {}", 7))()


def _sections(text):
    """{section: sorted lines}: jax runs a jit's unordered callbacks in any order;
    podlet runs them in program order (checked separately)."""
    out, cur = {}, "start"
    for line in text.splitlines():
        if not line.startswith(("x=", "cb", "const", "two-call", "1.23")):
            cur = line
            out.setdefault(cur, [])
        else:
            out.setdefault(cur, []).append(line)
    return {k: sorted(v) for k, v in out.items()}


def test_debug_print_and_callback_match_jax(capsys):
    _debug_program(jax, jnp)
    want = capsys.readouterr().out
    _debug_program(podlet, pnp)
    got = capsys.readouterr().out
    assert _sections(got) == _sections(want)
    # podlet: program order within one execution, executions in call order
    jit_part = got.split("jit\n", 1)[1].split("nested jit")[0].splitlines()
    assert jit_part == ["x=[0. 1. 2.] s=3.0", "cb [0. 2. 4.]", "x=[1. 2. 3.] s=6.0", "cb [2. 4. 6.]"]


def test_debug_print_runs_at_run_time_not_trace_time(capfd):
    f = podlet.jit(lambda x: (podlet.debug.print("v={}", x), x * 2)[1])
    f(pnp.float32(1.0))
    f(pnp.float32(2.0))
    f(pnp.float32(3.0))
    assert f.trace_count == 1
    assert capfd.readouterr().out.splitlines() == ["v=1.0", "v=2.0", "v=3.0"]


def test_debug_print_errors():
    for lib in (jax, podlet):
        e = _err(lambda: lib.debug.print("{}", 1, 2))
        assert e[0] is ValueError and "Unused positional arguments" in e[1]
        e = _err(lambda: lib.debug.print("{x}", x=1, y=2))
        assert e[0] is ValueError and "Unused keyword arguments" in e[1]
        e = _err(lambda: lib.debug.print(ordered=True, extra=1))
        assert e[0] is TypeError and "two-call form" in e[1]


def test_debug_print_in_a_loop_body_warns():
    def body(c, x):
        podlet.debug.print("{}", x)
        return c + x, c

    with pytest.warns(UserWarning, match="podlet.debug callback"):
        podlet.lax.scan(body, pnp.float32(0), pnp.arange(3.0))


# ------------------------------------------------------------------ pure_callback

def _callback_program(lib, jnp_, calls):
    def cb(x, y):
        calls.append(np.shape(x))
        return (np.sin(np.asarray(x)) + np.asarray(y)).astype(np.float32)

    sd = lib.ShapeDtypeStruct((3,), jnp_.float32)
    f = lambda x, y=1.0: lib.pure_callback(cb, sd, x, y) * 2  # noqa: E731
    jf = lib.jit(f)
    out = [f(jnp_.arange(3.0)), jf(jnp_.arange(3.0)), jf(jnp_.arange(3.0) + 1)]
    for m in ("sequential", "expand_dims"):
        out.append(lib.vmap(lambda x: lib.pure_callback(cb, sd, x, 2.0, vmap_method=m))(
            jnp_.arange(6.0).reshape(2, 3)))
    tree = lib.pure_callback(lambda x: (x, {"a": x * 2}), (sd, {"a": sd}), jnp_.ones(3))
    return [np.asarray(o) for o in out], tree


def test_pure_callback_matches_jax():
    jcalls, pcalls = [], []
    jout, jtree = _callback_program(jax, jnp, jcalls)
    pout, ptree = _callback_program(podlet, pnp, pcalls)
    for a, b in zip(jout, pout):
        np.testing.assert_allclose(b, a, rtol=1e-6)
        assert a.dtype == b.dtype
    assert str(jax.tree.structure(jtree)) == str(ptu.tree_structure(ptree))
    # eager + one call per jit execution; vmap: jax passes the batch for expand_dims,
    # podlet always calls per element
    assert jcalls[:3] == pcalls[:3] == [(3,)] * 3
    assert pcalls[3:] == [(3,)] * 4


def test_pure_callback_errors():
    sd = jax.ShapeDtypeStruct((3,), jnp.float32)
    psd = podlet.ShapeDtypeStruct((3,), pnp.float32)
    for bad in (lambda x: np.ones(4, np.float32), lambda x: np.ones(3, np.int32)):
        j = _err(lambda: jax.pure_callback(bad, sd, jnp.ones(3)))
        p = _err(lambda: podlet.pure_callback(bad, psd, pnp.ones(3)))
        assert issubclass(j[0], RuntimeError) and issubclass(p[0], RuntimeError)
        assert j[1].splitlines()[-1].endswith(p[1])
    j = _err(lambda: jax.vmap(lambda x: jax.pure_callback(np.sin, sd, x))(jnp.ones((2, 3))))
    p = _err(lambda: podlet.vmap(lambda x: podlet.pure_callback(np.sin, psd, x))(pnp.ones((2, 3))))
    assert j == p and j[0] is NotImplementedError
    one = lambda lib, jnp_: lib.grad(lambda x: lib.pure_callback(  # noqa: E731
        lambda v: v, lib.ShapeDtypeStruct((), jnp_.float32), x))(1.0)
    assert issubclass(_err(lambda: one(jax, jnp))[0], ValueError)
    assert issubclass(_err(lambda: one(podlet, pnp))[0], ValueError)


# ------------------------------------------------------------ config contexts

def test_debug_nans_and_infs():
    for lib, jnp_ in ((jax, jnp), (podlet, pnp)):
        f = lib.jit(lambda x: jnp_.log(x) - 1)
        assert np.isnan(np.asarray(f(-1.0)))  # off: no check
        for flag, bad, kind in (("debug_nans", -1.0, "nan"), ("debug_infs", 0.0, "inf")):
            with getattr(lib, flag)(True):
                for call in (lambda: f(bad), lambda: jnp_.log(jnp_.float32(bad)) - 1):
                    e = _err(call)
                    assert e == (FloatingPointError, f"invalid value ({kind}) encountered in log"), (lib, e)
                assert float(f(2.0)) == pytest.approx(np.log(2.0) - 1)
            assert np.isfinite(np.asarray(jnp_.log(jnp_.float32(2.0))))
        assert not getattr(lib.config, "jax_debug_nans")


def test_disable_jit_and_log_compiles(caplog):
    seen = []

    @podlet.jit
    def f(x):
        seen.append(type(x).__name__)
        return x * 2

    f(pnp.float32(1))
    with podlet.disable_jit():
        assert float(f(pnp.float32(2))) == 4.0
        f(pnp.float32(3))
    assert seen[0] == "Tracer" and len(seen) == 3 and "Tracer" not in seen[1:]
    with podlet.log_compiles(True), caplog.at_level("WARNING", logger="podlet.jit"):
        podlet.jit(lambda x: x + 1)(pnp.float32(1))
    assert "Finished tracing + transforming" in caplog.text
    # decorator form, as jax's contexts
    assert podlet.disable_jit()(lambda: podlet.config.disable_jit)() is True
    assert podlet.config.disable_jit is False


def test_numpy_rank_and_dtype_promotion():
    for lib, jnp_ in ((jax, jnp), (podlet, pnp)):
        with lib.numpy_rank_promotion("raise"):
            e = _err(lambda: jnp_.ones(3) + jnp_.ones((2, 3)))
            assert e[0] is ValueError and e[1].startswith(
                "Operands could not be broadcast together for add on shapes (3,) (2, 3) and with "
                "the config option jax_numpy_rank_promotion='raise'.")
            assert (jnp_.ones(3) + 1.0).shape == (jnp_.ones(3) + jnp_.float32(2)).shape == (3,)
        with lib.numpy_rank_promotion("warn"), pytest.warns(UserWarning, match="rank_promotion"):
            jnp_.ones(3) * jnp_.ones((2, 3))
        with lib.numpy_dtype_promotion("strict"):
            assert (jnp_.ones(3) + 1).dtype == np.float32
            for a, b in ((jnp_.ones(3, jnp_.int32), jnp_.ones(3)), (jnp_.ones(3, jnp_.int32), 1.0)):
                e = _err(lambda: a + b)
                assert issubclass(e[0], (TypeError, ValueError)) and "jax_numpy_dtype_promotion=strict" in e[1]
        assert (jnp_.ones(3, jnp_.int32) + jnp_.ones(3)).dtype == np.float32


def test_flag_contexts_round_trip():
    for name, value in (("checking_leaks", True), ("check_tracer_leaks", True),
                        ("transfer_guard", "disallow"), ("transfer_guard_host_to_device", "log"),
                        ("transfer_guard_device_to_host", "disallow"),
                        ("transfer_guard_device_to_device", "log"), ("default_device", "cpu")):
        key = "check_tracer_leaks" if name == "checking_leaks" else name
        before = getattr(podlet.config, key)
        with getattr(podlet, name)(value):
            assert getattr(podlet.config, key) == value
        assert getattr(podlet.config, key) == before
    with podlet.enable_x64(True):
        assert podlet.config.enable_x64 and pnp.array([1.5]).dtype == np.float64
    assert not podlet.config.enable_x64 and pnp.array([1.5]).dtype == np.float32
    assert _err(lambda: podlet.transfer_guard("sometimes").__enter__())[0] is ValueError
    with podlet.ensure_compile_time_eval():
        assert float(pnp.float32(2) * 3) == 6.0


NEW_FLAGS = [  # jax's config flags that are context managers too (issue 26): name, a non-default value
    ("enable_checks", True), ("debug_key_reuse", True), ("default_prng_impl", "rbg"), ("legacy_prng_key", "warn"),
    ("enable_custom_prng", True), ("allow_f16_reductions", False), ("thread_guard", True),
    ("array_garbage_collection_guard", "log"), ("default_matmul_precision", "float32")]


@pytest.mark.parametrize("name, value", NEW_FLAGS, ids=[n for n, _ in NEW_FLAGS])
def test_more_flag_contexts_like_jax(name, value):
    """Same default, the value readable through config inside the block (also as jax_<name>
    and as a decorator), restored after it, set by config.update, and jax's bad values refused."""
    assert str(getattr(podlet.config, name)) == str(getattr(jax.config, "jax_" + name))
    before = getattr(podlet.config, name)
    with getattr(podlet, name)(value), getattr(jax, name)(value):
        assert getattr(podlet.config, name) == value == getattr(podlet.config, "jax_" + name)
        assert str(getattr(jax.config, "jax_" + name)) == str(value)
    assert getattr(podlet.config, name) == before
    assert getattr(podlet, name)(value)(lambda: getattr(podlet.config, name))() == value
    podlet.config.update("jax_" + name, value)
    try:
        assert getattr(podlet.config, name) == value
    finally:
        podlet.config.update("jax_" + name, before)
    if not isinstance(value, bool):
        assert _err(lambda: podlet.config.update("jax_" + name, "nonsense"))[0] is ValueError
        assert _err(lambda: jax.config.update("jax_" + name, "nonsense"))[0] is ValueError


def test_flags_that_act_in_podlet():
    # allow_f16_reductions=False: bf16 reduce_sum over an axis longer than 1 raises jax's error
    x = np.ones((3, 1), jnp.bfloat16)
    with podlet.allow_f16_reductions(False), jax.allow_f16_reductions(False):
        pe, je = _err(lambda: podlet.lax.reduce_sum(x, (0,))), _err(lambda: jax.lax.reduce_sum(x, (0,)))
        assert pe[0] is je[0] is ValueError and "is not allowed when jax_allow_f16_reductions=False" in pe[1]
        assert float(podlet.lax.reduce_sum(x, (1,))[0]) == 1.0  # a size-1 axis is allowed, as in jax
        assert podlet.lax.reduce_sum(x.astype(np.float32), (0,)).shape == (1,)
    assert float(podlet.lax.reduce_sum(x, (0,))[0]) == 3.0
    # default_prng_impl: keys made without impl; podlet implements threefry2x32 only
    with podlet.default_prng_impl("threefry2x32"):
        np.testing.assert_array_equal(np.asarray(podlet.random.key(7)), np.asarray(podlet.random.PRNGKey(7)))
    with podlet.default_prng_impl("rbg"):
        kind, msg = _err(lambda: podlet.random.key(0))
        assert kind is ValueError and "'rbg'" in msg and "threefry2x32" in msg
        np.testing.assert_array_equal(np.asarray(podlet.random.key(0, impl="threefry2x32")),
                                      np.asarray(jax.random.key_data(jax.random.key(0))))


# ------------------------------------------------------------------ misc names

def test_make_jaxpr_and_typeof():
    def f(x, y):
        return pnp.sum(pnp.sin(x) * 2, axis=0), x.T @ y

    cj = podlet.make_jaxpr(f)(pnp.ones((3, 2)), pnp.ones(3))
    text = str(cj)
    assert text.startswith("{ lambda ") and "a:f32[3,2] b:f32[3]. let" in text
    assert "= sin a" in text and "reduce_sum[axes=[0]]" in text and text.endswith("}")
    jcj = jax.make_jaxpr(lambda x: x * 2)(jnp.ones(3))
    pcj = podlet.make_jaxpr(lambda x: x * 2)(pnp.ones(3))
    assert repr(jcj.in_avals) == repr(pcj.in_avals) and repr(jcj.out_avals) == repr(pcj.out_avals)
    assert len(jcj.eqns) == len(pcj.eqns) == 1
    _, shapes = podlet.make_jaxpr(lambda x: {"y": x * 2}, return_shape=True)(pnp.ones(3))
    assert repr(shapes) == repr(jax.make_jaxpr(lambda x: {"y": x * 2}, return_shape=True)(jnp.ones(3))[1])
    podlet.make_jaxpr(lambda x, n: x * n, static_argnums=1)(pnp.ones(2), 3)
    for jx, px in ((jnp.ones((2, 3), jnp.int32), pnp.ones((2, 3), pnp.int32)), (jnp.ones(2), pnp.ones(2)),
                   (1.0, 1.0), (True, True)):
        assert str(jax.typeof(jx)) == str(podlet.typeof(px))
        assert repr(jax.typeof(jx)) == repr(podlet.typeof(px))
    seen = []
    podlet.jit(lambda x: seen.append(str(podlet.typeof(x))) or x)(pnp.ones((4,)))
    assert seen == ["float32[4]"]


def test_named_scope_and_call():
    from podlet._src.scopes import current_scope
    for lib in (jax, podlet):
        assert _err(lambda: lib.named_scope(3).__enter__()) == (
            TypeError, "named_scope name argument must be a string.")
        assert lib.named_call(lambda x: x + 1, name="bar")(1) == 2
    seen = []
    with podlet.named_scope("outer"):
        podlet.named_call(lambda: seen.append(current_scope()), name="inner")()
    assert seen == ["outer/inner"] and current_scope() == ""


def test_custom_gradient():
    def defs(lib, jnp_):
        @lib.custom_gradient
        def f(x):
            return x ** 2, lambda g: (g * 3.0,)

        @lib.custom_gradient
        def h(x, y):
            return x * y, lambda g: (g * y * 10, g * x)

        @lib.custom_gradient
        def k(x):
            return jnp_.sin(x), lambda g: g * jnp_.cos(x) * 2

        return [f(2.0), lib.grad(f)(2.0), lib.jit(lib.grad(f))(2.0),
                *lib.grad(h, argnums=(0, 1))(2.0, 3.0), lib.grad(k)(2.0),
                lib.vmap(lib.grad(k))(jnp_.arange(3.0))]

    for a, b in zip(defs(jax, jnp), defs(podlet, pnp)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6)


def test_closure_convert():
    def run(lib, jnp_):
        counts = []

        def outer(w):
            fn = lambda x: x * w + 1.0  # noqa: E731
            g, consts = lib.closure_convert(fn, jnp_.ones(2))
            counts.append([tuple(c.shape) for c in consts])
            return g(jnp_.arange(2.0), *consts).sum()

        return outer(jnp_.ones(2)), lib.grad(outer)(jnp_.full(2, 3.0)), counts

    j, p = run(jax, jnp), run(podlet, pnp)
    assert float(j[0]) == float(p[0]) and j[2] == p[2] == [[], [(2,)]]
    np.testing.assert_array_equal(np.asarray(p[1]), np.asarray(j[1]))
    c = np.ones(2, np.float32)
    assert podlet.closure_convert(lambda x: x * c, pnp.ones(2))[1] == []


def test_environment_and_devices(capsys):
    podlet.print_environment_info()
    out = capsys.readouterr().out
    assert out.startswith("podlet: ") and "python:" in out and "device info:" in out
    assert podlet.print_environment_info(return_string=True) == out[:-1]
    with pytest.warns(UserWarning, match="renamed"):
        got = (podlet.host_count(), podlet.host_id(), podlet.host_ids())
    with pytest.warns(UserWarning, match="renamed"):
        assert got == (jax.host_count(), jax.host_id(), jax.host_ids()) == (1, 0, [0])
    for x in (np.ones(2, np.float32), 1.0, 3, {"a": np.arange(3)}):
        j, p = jax.device_put(x), podlet.device_put(x)
        assert str(jax.tree.structure(j)) == str(ptu.tree_structure(p))
        for a, b in zip(jax.tree.leaves(j), ptu.tree_leaves(p)):
            assert isinstance(b, podlet.Array) and a.dtype == b.dtype
            assert a.weak_type == b.weak_type
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert podlet.float0 == jax.float0
    f = podlet.jit(lambda x: x + 1)
    f(pnp.float32(1))
    assert podlet.clear_caches() is None and f._cache == {}
    f(pnp.float32(1))
    assert f.trace_count == 2


# ------------------------------------------------------------------ flax.jax_utils

def test_scan_in_dim():
    from flax import jax_utils as fju
    from podlet import jax_utils as pju
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    def body(c, v):
        return c + v["a"].sum(), {"a": v["a"] * 2 + c}

    for axis, keepdims, unroll in ((1, False, 1), ((2, 0), False, 2), ((0, 2), True, 1)):
        jc, jy = fju.scan_in_dim(body, jnp.float32(0), {"a": jnp.asarray(x)}, axis=axis,
                                 keepdims=keepdims, unroll=unroll)
        pc, py = pju.scan_in_dim(body, pnp.float32(0), {"a": pnp.asarray(x)}, axis=axis,
                                 keepdims=keepdims, unroll=unroll)
        assert float(jc) == float(pc)
        np.testing.assert_array_equal(np.asarray(py["a"]), np.asarray(jy["a"]))


def test_partial_eval_by_shape_and_pmean():
    from flax import jax_utils as fju
    from podlet import jax_utils as pju

    def fn(lib):
        return lambda x, y, scale: {"known": lib.ones(3) * scale, "shape": x @ y, "n": 3}

    j = fju.partial_eval_by_shape(fn(jnp), [(2, 3), ((3, 5), jnp.int32)], 2.0)
    p = pju.partial_eval_by_shape(fn(pnp), [(2, 3), ((3, 5), pnp.int32)], 2.0)
    assert repr(j["shape"]) == repr(p["shape"])
    np.testing.assert_array_equal(np.asarray(p["known"]), np.asarray(j["known"]))
    assert j["n"] == p["n"] == 3
    with pytest.warns(DeprecationWarning, match="use jax.lax.pmean instead"):
        out = podlet.vmap(lambda v: pju.pmean(v, "i"), axis_name="i")(pnp.arange(4.0))
    np.testing.assert_array_equal(np.asarray(out), np.full(4, 1.5, np.float32))


def test_pad_shard_unpad():
    from flax import jax_utils as fju
    from podlet import jax_utils as pju

    def run(lib, ju):
        @ju.pad_shard_unpad
        @lib.pmap
        def fwd(params, x, y):
            return {"out": x * params["w"] + y.sum(-1)}

        params = ju.replicate({"w": np.float32(2.0)})
        x = np.arange(5, dtype=np.float32)
        y = np.ones((5, 2), np.float32)
        res = [fwd(params, x, y)["out"], fwd(params, x, y, min_device_batch=4)["out"]]
        static = ju.pad_shard_unpad(lambda p, x: x.shape, static_return=True)
        return [np.asarray(r) for r in res], static(None, x)

    (jr, js), (pr, ps) = run(jax, fju), run(podlet, pju)
    for lib, shape in ((jax, js), (podlet, ps)):  # jax's test host may have more devices
        d = lib.local_device_count()
        assert shape == (d, -(-5 // d))
    for a, b in zip(jr, pr):
        np.testing.assert_array_equal(b, a)


def test_no_tracing_and_no_execution():
    for lib, jnp_ in ((jax, jnp), (podlet, pnp)):
        f = lib.jit(lambda x: x * 2)
        with lib.no_tracing(True):
            e = _err(lambda: f(jnp_.float32(1)))
            assert e[0] is RuntimeError and e[1].startswith("re-tracing function ")
            assert e[1].endswith("for `jit`, but 'no_tracing' is set")
        f(jnp_.float32(1))
        three, two = jnp_.asarray(np.float32(3)), jnp_.ones(2)
        with lib.no_execution(True):
            for call in (lambda: f(three), lambda: jnp_.sin(three)):
                e = _err(call)
                assert e[0] is RuntimeError and e[1].endswith("but the no_execution config option is set")
            assert len(lib.make_jaxpr(lambda x: x + 1)(two).eqns) == 1
        assert float(f(jnp_.float32(3))) == 6.0
    with podlet.explain_cache_misses(True):
        assert podlet.config.explain_cache_misses is True


# ------------------------------------------------------------------ flax.linen

def _name_scope_models(nn):
    class Foo(nn.Module):
        @nn.compact_name_scope
        def up(self, x):
            return nn.Dense(3)(x)

        @nn.compact_name_scope
        def down(self, x):
            return nn.Dense(3, name="d")(x)

        def __call__(self, x):
            return self.up(x) + self.down(x)

    class Outer(nn.Module):  # flax attaches Foo's scopes to the module running its setup
        @nn.compact
        def __call__(self, x):
            return Foo()(x) + nn.Dense(3)(x)

    return Foo, Outer


def test_compact_name_scope():
    import flax.linen as fnn
    import podlet.nn as pnn
    x = np.ones((1, 2), np.float32)
    for jm, pm in zip(_name_scope_models(fnn), _name_scope_models(pnn)):
        jv = jm().init(jax.random.PRNGKey(0), jnp.asarray(x))
        pv = pm().init(podlet.random.PRNGKey(0), pnp.asarray(x))
        assert str(jax.tree.map(np.shape, jv)) == str(ptu.tree_map(np.shape, pv))
        for a, b in zip(jax.tree.leaves(jv), ptu.tree_leaves(pv)):
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a))
        if pm.__name__ != "Outer":  # (jax's eager apply is slow; one model is enough)
            np.testing.assert_allclose(np.asarray(pm().apply(pv, pnp.asarray(x))),
                                       np.asarray(jm().apply(jv, jnp.asarray(x))), rtol=1e-6)
    jfoo, pfoo = _name_scope_models(fnn)[0], _name_scope_models(pnn)[0]
    jv = jfoo().init(jax.random.PRNGKey(0), jnp.asarray(x))
    pv = pfoo().init(podlet.random.PRNGKey(0), pnp.asarray(x))
    np.testing.assert_allclose(np.asarray(pfoo().apply(pv, pnp.asarray(x), method="down")),
                               np.asarray(jfoo().apply(jv, jnp.asarray(x), method="down")), rtol=1e-6)
    j, p = _err(lambda: jfoo().up(jnp.asarray(x))), _err(lambda: pfoo().up(pnp.asarray(x)))
    assert j[0] is ValueError and issubclass(p[0], ValueError) and j[1] == p[1]


def _share_scope_models(nn):
    class DenseLoRA(nn.Module):
        base: nn.Dense
        rank: int

        def setup(self):
            nn.share_scope(self, self.base)

        @nn.compact
        def __call__(self, x):
            a = self.param("A", nn.initializers.ones, (x.shape[-1], self.rank))
            b = self.param("B", nn.initializers.ones, (self.rank, self.base.features))
            return self.base(x) + x @ a @ b

    class Model(nn.Module):  # other's scope is independent: module moves into it
        @nn.compact
        def __call__(self, x):
            return DenseLoRA(nn.Dense(4), rank=2)(x)

    class DenseLoRA2(nn.Module):
        features: int

        def setup(self):
            self.child = nn.Dense(self.features)
            nn.share_scope(self, self.child)

        @nn.compact
        def __call__(self, x):
            return self.child(x) + (x @ self.param("A", nn.initializers.ones, (x.shape[-1], 2))).sum()

    class Model2(nn.Module):  # other is a child: it moves into module's scope
        @nn.compact
        def __call__(self, x):
            return DenseLoRA2(4)(x)

    return Model, Model2


def test_share_scope():
    import flax.linen as fnn
    import podlet.nn as pnn
    x = np.ones((1, 5), np.float32)
    for jm, pm in zip(_share_scope_models(fnn), _share_scope_models(pnn)):
        jv = jm().init(jax.random.PRNGKey(0), jnp.asarray(x))
        pv = pm().init(podlet.random.PRNGKey(0), pnp.asarray(x))
        assert str(jax.tree.map(np.shape, jv)) == str(ptu.tree_map(np.shape, pv))
        for a, b in zip(jax.tree.leaves(jv), ptu.tree_leaves(pv)):
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a))
        if pm.__name__ != "Model2":  # (jax's eager apply is slow; one model is enough)
            np.testing.assert_allclose(np.asarray(pm().apply(pv, pnp.asarray(x))),
                                       np.asarray(jm().apply(jv, jnp.asarray(x))), rtol=1e-6)
    j = _err(lambda: fnn.share_scope(fnn.Dense(2), fnn.Dense(3)))
    p = _err(lambda: pnn.share_scope(pnn.Dense(2), pnn.Dense(3)))
    assert j[0].__name__ == p[0].__name__ == "CallShareScopeOnUnboundModuleError"
    assert j[1].split(" (")[0] == p[1].split(" (")[0]


def test_threefry_partitionable_and_user_context():
    for flag in (False, True):
        with jax.threefry_partitionable(flag):
            want = np.asarray(jax.random.uniform(jax.random.PRNGKey(3), (5,)))
        with podlet.threefry_partitionable(flag):
            got = np.asarray(podlet.random.uniform(podlet.random.PRNGKey(3), (5,)))
        np.testing.assert_array_equal(got, want)
    assert podlet.config.threefry_partitionable is True
    ctx = podlet.make_user_context(default_value=None)
    f = podlet.jit(lambda x: x * 2)
    f(pnp.float32(1))
    with ctx(1):
        f(pnp.float32(1))
        f(pnp.float32(2))
        assert ctx.value == 1
    with ctx(2):
        f(pnp.float32(1))
    f(pnp.float32(1))
    assert f.trace_count == 3 and ctx.value is None


def test_fwd_and_bwd():
    def fun(np_):
        return lambda x, w: np_.sum(np_.tanh(x @ w))

    x, w = np.ones((2, 3), np.float32), np.arange(6, dtype=np.float32).reshape(3, 2) / 10
    for argnums in (1, (0, 1)):
        jf, jb = jax.fwd_and_bwd(fun(jnp), argnums)
        pf, pb = podlet.fwd_and_bwd(fun(pnp), argnums)
        jy, jv = jf(jnp.asarray(x), jnp.asarray(w))
        py, pv = pf(pnp.asarray(x), pnp.asarray(w))
        np.testing.assert_allclose(float(py), float(jy), rtol=1e-6)
        jg, pg = jb(jv, jnp.float32(1)), pb(pv, pnp.float32(1))
        for a, b in zip(jax.tree.leaves(jg), ptu.tree_leaves(pg)):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5)
        assert str(jax.tree.structure(jg)) == str(ptu.tree_structure(pg))
