"""A symbolic batch dimension for an exported graph, found by tracing at several batch sizes.

The rules in ``onnx.py`` write every shape they need (Reshape targets, Expand shapes,
Slice ends, Clip bounds, ...) as a constant, and operations on concrete values (a ViT's
class token broadcast to the batch, a position embedding broadcast before the add) run
eagerly while tracing, so they arrive as constants too. Rather than teaching each rule
about a symbolic batch, the model is traced and lowered at three batch sizes: the three
graphs must have the same nodes and attributes, and they may differ only in
initializers. Each initializer that differs is replaced by a value computed from the
input's shape at run time:

- an integer tensor of one shape whose elements are ``a * batch + c`` at all three batch
  sizes (a shape, a slice end, a clip bound, an index such as ``batch - 1``):
  ``Add(Mul(a, batch), c)``;
- a tensor whose axes of ``a * batch`` entries repeat a block of ``a`` entries along
  them (a weight broadcast over the batch, a Swin mask tiled over batch * windows):
  ``Tile(block, repeats)``.

Anything else (a float constant whose value depends on the batch, like the ``1/B`` of a
mean over the batch axis; a size quadratic in the batch; a graph whose structure changes
with the batch) raises DynamicBatchError naming the primitive that made it.
"""
import numpy as np

from .._src.errors import PodletError

# Three batch sizes. None is 1: a dim of 1 broadcasts, so a rule may emit other nodes for
# it. The first two pin a * B + c; the third checks it far away, where a value that only
# looked linear near 2 and 3 departs from the line: a slice of the batch axis such as
# x[:8] (the whole batch at 2 and 3, 8 rows at 101) raises instead of being read as the
# whole batch. A clamp beyond 101 rows would still pass: the one blind spot.
TRACE_BATCHES = (2, 3, 101)
BATCH = "batch"


class DynamicBatchError(PodletError):
    """The exported graph cannot take its batch size at run time."""


def _where(node):
    if node is None:
        return "the graph's outputs"
    return f"primitive {node.prim!r} [at {node.where}]"


def _fit_linear(values, batches):
    """Per element (a, c) with value = a * B + c at every batch size B, or None."""
    v = [np.asarray(x, np.int64) for x in values]
    (b0, b1) = batches[:2]
    num = v[1] - v[0]
    if np.any(num % (b1 - b0)):
        return None
    a = num // (b1 - b0)
    c = v[0] - a * b0
    if any(not np.array_equal(a * bb + c, vv) for bb, vv in zip(batches, v)):
        return None
    return a, c


def _tile_block(arrays, batches):
    """(block, per-axis slope a) when every array is its block tiled B times along the
    axes whose size is a * B; None otherwise."""
    shapes = [a.shape for a in arrays]
    if len({len(s) for s in shapes}) != 1:
        return None
    fit = _fit_linear([np.asarray(s, np.int64) for s in shapes], batches)
    if fit is None:
        return None
    slope, icpt = fit
    if np.any(icpt[slope != 0]) or np.any(slope < 0):
        return None
    block = arrays[0][tuple(slice(0, int(a)) if a else slice(None) for a in slope)]
    for arr, bb in zip(arrays, batches):
        reps = [bb if a else 1 for a in slope]
        if not np.array_equal(np.tile(block, reps), arr):
            return None
    return block, slope


class _Prologue:
    """The nodes that compute batch-dependent values from the first input's shape."""

    def __init__(self, onnx, input_name):
        self.onnx, self.h, self.input_name = onnx, onnx.helper, input_name
        self.nodes, self.inits, self.cache = [], [], {}
        self.counter = 0
        self._batch = {}

    def fresh(self, hint):
        self.counter += 1
        return f"dynbatch/{hint}_{self.counter}"

    def const(self, value, hint="c"):
        name = self.fresh(hint)
        self.inits.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op, inputs, out=None, **attrs):
        out = out or self.fresh(op.lower())
        self.nodes.append(self.h.make_node(op, inputs, [out], **attrs))
        return out

    def batch(self, rank):
        """The run-time batch size as int64: a scalar (rank 0) or a (1,) vector."""
        key = min(rank, 1)
        if key not in self._batch:
            if "shape" not in self._batch:
                self._batch["shape"] = self.node("Shape", [self.input_name])
            idx = self.const(np.asarray(0 if key == 0 else [0], np.int64), "axis0")
            self._batch[key] = self.node("Gather", [self._batch["shape"], idx], axis=0)
        return self._batch[key]

    def linear(self, a, c, out, elem_type):
        """out = a * batch + c (int64 arrays of one shape), cast to elem_type."""
        key = (a.shape, a.tobytes(), c.tobytes(), elem_type)
        if key in self.cache:
            return self.node("Identity", [self.cache[key]], out)
        i64 = self.onnx.TensorProto.INT64
        y = self.node("Mul", [self.const(a, "slope"), self.batch(a.ndim)])
        if np.any(c):
            y = self.node("Add", [y, self.const(c, "offset")])
        y = self.node("Cast", [y], out, to=elem_type) if elem_type != i64 else self.node("Identity", [y], out)
        self.cache[key] = out
        return out


def make_batch_dynamic(models, builders, batches, input_names):
    """The first of `models` (the same model lowered at `batches`, with the _Builder of
    each) with its batch size read from the first input's leading dim at run time;
    raises DynamicBatchError."""
    from .onnx import _onnx  # its clear error when onnx is missing (here for a direct caller)
    onnx = _onnx()
    numpy_helper = onnx.numpy_helper  # a submodule `import onnx` loads
    base = models[0]
    g0 = base.graph
    # 1. One structure: same nodes, inputs, outputs and attributes at every batch size.
    for m, bld, bb in zip(models[1:], builders[1:], batches[1:]):
        g = m.graph
        for i in range(max(len(g0.node), len(g.node))):
            n0 = g0.node[i] if i < len(g0.node) else None
            n1 = g.node[i] if i < len(g.node) else None
            if n0 == n1:
                continue
            if n0 is not None and n1 is not None and (n0.op_type, list(n0.input), list(n0.output)) == \
                    (n1.op_type, list(n1.input), list(n1.output)):
                what = f"{_where(builders[0].node_origin[i])} lowers to an ONNX {n0.op_type} whose attributes " \
                       f"differ between batch {batches[0]} and batch {bb}"
            else:
                def at(n, b_, batch):
                    if n is None:
                        return f"at batch {batch} the graph has ended"
                    return f"at batch {batch} {_where(b_.node_origin[i])} lowers to ONNX {n.op_type}"
                what = f"the graph changes with the batch size: {at(n0, builders[0], batches[0])}, " \
                       f"{at(n1, bld, bb)}"
            raise DynamicBatchError(f"dynamic batch: {what}, so the batch cannot be left to run time (export "
                                    f"with dynamic_batch=False for a fixed batch)")
        if [t.name for t in g.initializer] != [t.name for t in g0.initializer]:
            raise DynamicBatchError(f"dynamic batch: the model's constants differ in number between batch "
                                    f"{batches[0]} and batch {bb} (export with dynamic_batch=False)")
    # 2. The initializers that differ, as values computed from the batch.
    pro = _Prologue(onnx, input_names[0])
    keep = []
    others = [{t.name: t for t in m.graph.initializer} for m in models[1:]]
    for t in g0.initializer:
        if all(o[t.name] == t for o in others):
            keep.append(t)
            continue
        origin = _where(builders[0].origin.get(t.name))
        arrays = [numpy_helper.to_array(t)] + [numpy_helper.to_array(o[t.name]) for o in others]
        desc = f"a constant of dtype {arrays[0].dtype} and shape {list(arrays[0].shape)} (at batch {batches[0]})"
        if len({a.shape for a in arrays}) == 1:
            fit = _fit_linear(arrays, batches) if np.issubdtype(arrays[0].dtype, np.integer) else None
            if fit is None:
                kind = ("its values are not a * batch + c" if np.issubdtype(arrays[0].dtype, np.integer)
                        else "its values change with the batch size (e.g. a mean over the batch axis)")
                raise DynamicBatchError(
                    f"dynamic batch: {origin} uses {desc} that depends on the batch size: {kind}, so it "
                    f"cannot be computed at run time (export with dynamic_batch=False for a fixed batch)")
            pro.linear(fit[0], fit[1], t.name, t.data_type)
            continue
        tiled = _tile_block(arrays, batches)
        if tiled is None:
            raise DynamicBatchError(
                f"dynamic batch: {origin} uses {desc} whose shape depends on the batch size and whose "
                f"entries are not one block repeated for every example (shapes "
                f"{[list(a.shape) for a in arrays]} at batch {list(batches)}), so it cannot be computed at "
                f"run time (export with dynamic_batch=False for a fixed batch)")
        block, slope = tiled
        block_name = pro.fresh("block")
        keep.append(numpy_helper.from_array(np.ascontiguousarray(block), block_name))
        # the block repeated `batch` times along each axis of a * batch entries, once along the others
        reps = pro.linear((slope != 0).astype(np.int64), (slope == 0).astype(np.int64), pro.fresh("repeats"),
                          onnx.TensorProto.INT64)
        pro.node("Tile", [block_name, reps], t.name)
    # 3. The interface: the inputs' leading dim and every output dim equal to it are "batch".
    h = onnx.helper
    graph = h.make_graph(list(pro.nodes) + list(g0.node), g0.name, list(g0.input), list(g0.output),
                         initializer=keep + pro.inits)
    for vi in graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = BATCH
    for k, vi in enumerate(graph.output):
        dims = [[d.dim_value for d in m.graph.output[k].type.tensor_type.shape.dim] for m in models]
        for ax, d in enumerate(vi.type.tensor_type.shape.dim):
            sizes = [ds[ax] for ds in dims]
            if len(set(sizes)) == 1:
                continue
            if sizes == list(batches):
                d.dim_param = BATCH
            else:                    # a multiple of the batch: left unnamed
                d.Clear()
    model = h.make_model(graph, opset_imports=list(base.opset_import), producer_name=base.producer_name,
                         ir_version=base.ir_version)
    return model
