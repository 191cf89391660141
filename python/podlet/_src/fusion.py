"""The graph jit executes: the traced graph with elementwise chains fused
(cpp/podlet/ir/fusion.h), built once per cache entry. Only concrete execution uses it:
a graph inlined into an outer trace (grad of a jit'd function, nested jit) stays
unfused, so autodiff never sees a fused node.

PODLET_FUSION=0 in the environment turns fusion off (read at each call, so tests can
flip it).
"""
import os

from .. import _core


def enabled():
    return os.environ.get("PODLET_FUSION", "1").lower() not in ("0", "false", "no", "off")


def executable_graph(entry):
    """entry.graph with elementwise chains fused (cached on the entry), or entry.graph
    itself when fusion is off."""
    if not enabled() or not hasattr(_core, "fuse_elementwise"):
        return entry.graph
    g = getattr(entry, "_fused_graph", None)
    if g is None:
        g = entry._fused_graph = _core.fuse_elementwise(entry.graph)
    return g
