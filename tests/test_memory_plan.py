"""Memory planning (cpp/podlet/ir/memory_plan.cc): run_graph places intermediates at
planned offsets in one arena. Checked against lifetimes computed here from the graph
dump (no two values alive at the same time overlap; views keep what they view alive;
outputs stay out of the arena), and by running graphs with and without the plan: same
bits, and from the second run on no new memory."""
import re

import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import _core, lax

from fusion_chains import assert_same_bits
from test_remat import _args, _resnet_step

VIEWS = ("reshape", "stop_gradient", "bitcast_convert_type")  # kernels that return their input's buffer
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float64": 8, "int32": 4, "uint32": 4, "uint8": 1, "bool": 1}
VALUE = re.compile(r"%(\d+):(\w+)\(([\d, ]*)\)")


def _lifetimes(graph):
    """{value: (first node, last node incl. views, bytes, escapes)} for node outputs."""
    nodes, outputs = [], []
    for line in graph.dump().splitlines():
        if line.startswith(("inputs:", "const ")):
            continue
        if line.startswith("outputs:"):
            outputs = [int(t[1:]) for t in line.split()[1:]]
            continue
        lhs, rhs = line.split(" = ", 1)
        outs = [(int(m[1]), ITEMSIZE[m[2]] * int(np.prod([int(d) for d in m[3].split(",") if d.strip()] or [1])))
                for m in VALUE.finditer(lhs)]
        prim = rhs.split("(")[0]
        ins = [int(a) for a in re.findall(r"%(\d+)", rhs[:rhs.index(")")])]
        nodes.append((prim, ins, outs))
    last, esc = {}, set(outputs)
    for i, (_, ins, _) in enumerate(nodes):
        for v in ins:
            last[v] = i
    for v in outputs:
        last[v] = len(nodes)
    for i in reversed(range(len(nodes))):
        prim, ins, outs = nodes[i]
        if prim in VIEWS:
            for o, _ in outs:
                for v in ins:
                    last[v] = max(last.get(v, -1), last.get(o, -1))
                    if o in esc:
                        esc.add(v)
    life = {}
    for i, (prim, _, outs) in enumerate(nodes):
        for v, b in outs:
            life[v] = (i, max(i, last.get(v, i)), b, v in esc or prim in VIEWS)
    return life


def _check_plan(graph):
    plan = _core.memory_plan(graph)
    life = _lifetimes(graph)
    offs = plan["offsets"]
    assert offs, "nothing planned"
    for v in offs:
        assert not life[v][3], f"value {v} escapes the run but was placed in the arena"
    items = sorted((offs[v], offs[v] + life[v][2], life[v][0], life[v][1], v) for v in offs)
    for a in range(len(items)):
        for b in range(a + 1, len(items)):
            if items[b][0] >= items[a][1]:
                break
            # overlapping bytes: their lifetimes must be disjoint
            assert items[a][3] < items[b][2] or items[b][3] < items[a][2], (items[a], items[b])
    assert max(o + life[v][2] for v, o in offs.items()) <= plan["arena_bytes"] <= plan["sum_bytes"]
    return plan


def _run(graph, arrs, planned):
    _core.set_memory_plan(planned)
    try:
        return graph.run(arrs)
    finally:
        _core.set_memory_plan(True)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_resnet_step_plan_is_sound_and_runs_the_same(dtype):
    step, args = _resnet_step(dtype)
    g = podlet.jit(step).lower(*args).graph
    arrs = _args(*args)
    for graph in (g, _core.fuse_elementwise(_core.rematerialize(g))):
        plan = _check_plan(graph)
        assert plan["arena_bytes"] < 0.5 * plan["sum_bytes"], plan  # reuse happens
        assert_same_bits(_run(graph, arrs, False), _run(graph, arrs, True))


def test_views_keep_what_they_view_alive():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 96)).astype(np.float32)

    def f(x):
        a = jnp.exp(x)                          # an intermediate ...
        r = a.reshape(96, 64)                   # ... viewed by a reshape read much later
        b = lax.stop_gradient(jnp.tanh(x) * 3)  # a view that is an output of the graph
        c = jnp.sin(x) + 1.0
        d = jnp.cos(c) * 2.0                    # a's bytes must not be reused for these
        e = (d + jnp.log1p(jnp.abs(c))).reshape(96, 64)
        return r * 2.0 + e, b, a.reshape(-1)    # a reshape of an intermediate as an output

    g = podlet.make_graph(f, x)
    _check_plan(g)
    want = [np.asarray(o) for o in f(jnp.asarray(x))]
    for planned in (True, False):
        got = _run(g, _args(x), planned)
        for w, o in zip(want, got):
            np.testing.assert_array_equal(w, np.asarray(o))


def test_second_run_takes_no_new_memory():
    step, args = _resnet_step(jnp.bfloat16)
    graph = _core.fuse_elementwise(_core.rematerialize(podlet.jit(step).lower(*args).graph))
    arrs = _args(*args)
    graph.run(arrs)
    live0, _, pooled0 = _core.memory_stats()
    outs = graph.run(arrs)
    del outs
    live1, _, pooled1 = _core.memory_stats()
    assert live1 + pooled1 <= live0 + pooled0  # the arena and outputs came back from the pool
