"""Pretrained weights into podlet.models: torchvision ResNets and Flax msgpack files.

    variables = models.load_torchvision_resnet("resnet34.pth", "resnet34", in_channels=1, num_classes=5)
    model = models.ResNet34(num_classes=5, torchvision_padding=True)
    logits = model.apply(variables, images, train=False)

torchvision's layout maps onto podlet's (Flax's) one to one: ``conv1``/``bn1`` ->
``conv_init``/``bn_init``; ``layer{s}.{j}`` -> the ``k``-th block overall
(``ResNetBlock_k`` or ``BottleneckResNetBlock_k``), its ``conv{i}``/``bn{i}`` ->
``Conv_{i-1}``/``BatchNorm_{i-1}`` and ``downsample.0``/``.1`` -> ``Conv_2``/``BatchNorm_2``
(basic) or ``conv_proj``/``norm_proj`` (bottleneck); ``fc`` -> ``Dense_0``. Convolution
weights go OIHW -> HWIO, ``fc.weight`` is transposed, BatchNorm weight/bias/running
mean/var become params scale/bias and batch_stats mean/var. torchvision pads
symmetrically, so build the model with ``torchvision_padding=True`` for torch's exact
logits (with the default 'SAME' the weights still fine-tune well).

Transformers: ``load_torchvision_swin`` (``swin_t``/``swin_s`` -> ``SwinT``/``SwinS``:
``features.0`` -> ``patch_embed``/``patch_norm``, ``features.{2s+1}.{j}`` ->
``stage_{s}_block_{j}``, ``features.{2s+2}`` -> ``merge_{s}``, ``mlp.0``/``mlp.3`` ->
``mlp/fc1``/``mlp/fc2``) and ``load_torchvision_vit`` (``vit_b_16``/``vit_b_32`` ->
``ViTB16``/``ViTB32``: ``encoder_layer_{i}`` -> ``Transformer/encoderblock_{i}``,
``in_proj_weight`` split into query/key/value ``(width, heads, head_dim)`` kernels).
Linear weights are transposed into Dense kernels.
"""
import os

import numpy as np

from .. import numpy as jnp
from .. import random
from .. import tree_util
from .._src.errors import PodletError
from ..nn import initializers
from . import _flax_msgpack, _torch_pth

__all__ = ["load_torchvision_resnet", "load_torchvision_swin", "load_torchvision_vit", "load_flax_params",
           "load_pretrained", "torchvision_resnet_layout", "torchvision_swin_layout", "torchvision_vit_layout"]

# arch -> (blocks per stage, bottleneck?)
_ARCHS = {"resnet18": ([2, 2, 2, 2], False), "resnet34": ([3, 4, 6, 3], False), "resnet50": ([3, 4, 6, 3], True)}
_WIDTHS = [64, 128, 256, 512]


def torchvision_resnet_layout(arch: str, in_channels: int = 3, num_classes: int = 1000):
    """``{torch key: (podlet path, torch shape)}`` of torchvision's `arch` state_dict
    (without the ``num_batches_tracked`` counters). A podlet path is
    ``(collection, module, ..., name)``."""
    try:
        stages, bottleneck = _ARCHS[arch.lower()]
    except (KeyError, AttributeError):
        raise PodletError(f"unknown ResNet arch {arch!r}; expected one of {sorted(_ARCHS)}") from None
    layout = {}

    def conv(tkey, path, o, i, k):
        layout[f"{tkey}.weight"] = (("params", *path, "kernel"), (o, i, k, k))

    def bn(tkey, path, c):
        layout[f"{tkey}.weight"] = (("params", *path, "scale"), (c,))
        layout[f"{tkey}.bias"] = (("params", *path, "bias"), (c,))
        layout[f"{tkey}.running_mean"] = (("batch_stats", *path, "mean"), (c,))
        layout[f"{tkey}.running_var"] = (("batch_stats", *path, "var"), (c,))

    conv("conv1", ("conv_init",), 64, in_channels, 7)
    bn("bn1", ("bn_init",), 64)
    cin, k = 64, 0
    block = "BottleneckResNetBlock" if bottleneck else "ResNetBlock"
    for s, (n, w) in enumerate(zip(stages, _WIDTHS)):
        for j in range(n):
            t, p = f"layer{s + 1}.{j}", f"{block}_{k}"
            if bottleneck:
                cout = 4 * w
                for i, (o, ci, ks) in enumerate([(w, cin, 1), (w, w, 3), (cout, w, 1)]):
                    conv(f"{t}.conv{i + 1}", (p, f"Conv_{i}"), o, ci, ks)
                    bn(f"{t}.bn{i + 1}", (p, f"BatchNorm_{i}"), o)
                proj = ("conv_proj", "norm_proj")
            else:
                cout = w
                for i, ci in enumerate([cin, w]):
                    conv(f"{t}.conv{i + 1}", (p, f"Conv_{i}"), w, ci, 3)
                    bn(f"{t}.bn{i + 1}", (p, f"BatchNorm_{i}"), w)
                proj = ("Conv_2", "BatchNorm_2")
            if j == 0 and (s > 0 or cin != cout):  # torchvision: stride != 1 or width changes
                conv(f"{t}.downsample.0", (p, proj[0]), cout, cin, 1)
                bn(f"{t}.downsample.1", (p, proj[1]), cout)
            cin, k = cout, k + 1
    layout["fc.weight"] = (("params", "Dense_0", "kernel"), (num_classes, cin))
    layout["fc.bias"] = (("params", "Dense_0", "bias"), (num_classes,))
    return layout


def _as_numpy(name, v):
    if hasattr(v, "detach"):  # a torch tensor, when the caller passes a live state_dict
        v = v.detach().cpu().numpy()
    try:
        return np.asarray(v)
    except Exception as e:
        raise PodletError(f"state_dict entry {name!r} is not an array ({type(v).__name__}): {e}") from None


def _read_state_dict(path_or_state_dict):
    if isinstance(path_or_state_dict, (str, os.PathLike)):
        path = os.fspath(path_or_state_dict)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"torchvision checkpoint {path!r} does not exist")
        sd = _torch_pth.load(path)
        where = path
    else:
        sd, where = path_or_state_dict, "the state_dict"
    if not hasattr(sd, "items"):
        raise PodletError(f"{where}: expected a state_dict (a mapping of name -> tensor), got {type(sd).__name__}")
    sd = dict(sd.items())
    # A training checkpoint ({'state_dict': ..., 'epoch': ...} or {'model': ...}) holds the weights one level down.
    for key in ("state_dict", "model", "model_state_dict"):
        if key in sd and hasattr(sd[key], "items") and not any(k.endswith(".weight") for k in sd):
            sd = dict(sd[key].items())
            break
    # nn.DataParallel / DistributedDataParallel prefix every key with 'module.'.
    if sd and all(k.startswith("module.") for k in sd):
        sd = {k[len("module."):]: v for k, v in sd.items()}
    return sd, where


def _adapt_stem(w, in_channels):
    """OIHW stem weights for `in_channels` inputs: RGB summed for grayscale (a gray image
    seen as R=G=B gives the same activations), otherwise the channels repeated cyclically
    and rescaled so the activation scale is kept (timm's adapt_input_conv)."""
    c = w.shape[1]
    if c == in_channels:
        return w
    if in_channels == 1:
        return w.sum(axis=1, keepdims=True)
    reps = -(-in_channels // c)
    return np.tile(w, (1, reps, 1, 1))[:, :in_channels] * (c / in_channels)


def _checked_arrays(sd, shapes, where, what):
    """``{key: numpy array}`` of the state_dict `sd` when its keys are exactly those of
    `shapes` ``{key: torch shape}`` with those shapes; otherwise one PodletError naming
    every missing, unexpected and mis-shaped key."""
    missing = [k for k in shapes if k not in sd]
    unexpected = [k for k in sd if k not in shapes]
    misshaped = []
    arrays = {}
    for k, shape in shapes.items():
        if k in sd:
            arrays[k] = _as_numpy(k, sd[k])
            if arrays[k].shape != tuple(shape):
                misshaped.append(f"{k}: got {arrays[k].shape}, expected {tuple(shape)}")
    if missing or unexpected or misshaped:
        parts = []
        if missing:
            parts.append(f"missing keys {missing}")
        if unexpected:
            parts.append(f"unexpected keys {unexpected}")
        if misshaped:
            parts.append(f"mis-shaped keys [{'; '.join(misshaped)}]")
        raise PodletError(f"{where} is not a {what} state_dict: " + ", ".join(parts))
    return arrays


def load_torchvision_resnet(path_or_state_dict, arch: str, in_channels: int = 1, num_classes=None, rng=None):
    """Variables ``{'params', 'batch_stats'}`` for ``podlet.models.<arch>`` from a
    torchvision ResNet-18/34/50 state_dict (a .pth path or a mapping of tensors/arrays).

    Args:
      path_or_state_dict: ``torch.save(model.state_dict(), path)`` output, or the dict.
      arch: 'resnet18', 'resnet34' or 'resnet50'.
      in_channels: input channels of the podlet model; a 3-channel stem is summed over
        its input channels for 1, repeated and rescaled for other counts.
      num_classes: logits of the podlet model; None keeps the checkpoint's classifier.
        When it differs, the head is re-initialised (lecun_normal kernel, zero bias).
      rng: key for that re-initialisation (default ``PRNGKey(0)``).

    Raises PodletError naming every missing, unexpected and mis-shaped key at once.
    """
    sd, where = _read_state_dict(path_or_state_dict)
    sd = {k: v for k, v in sd.items() if not k.endswith("num_batches_tracked")}
    fc = sd.get("fc.weight")
    ckpt_classes = _as_numpy("fc.weight", fc).shape[0] if fc is not None and np.ndim(fc) == 2 else 1000
    stem = sd.get("conv1.weight")
    ckpt_in = _as_numpy("conv1.weight", stem).shape[1] if stem is not None and np.ndim(stem) == 4 else 3
    layout = torchvision_resnet_layout(arch, in_channels=ckpt_in, num_classes=ckpt_classes)

    arrays = _checked_arrays(sd, {k: shape for k, (_, shape) in layout.items()}, where, f"torchvision {arch}")

    variables = {"params": {}, "batch_stats": {}}
    for k, (path, _) in layout.items():
        a = arrays[k].astype(np.float32)
        if k == "conv1.weight":
            a = _adapt_stem(a, in_channels)
        if a.ndim == 4:
            a = a.transpose(2, 3, 1, 0)  # OIHW -> HWIO
        elif k == "fc.weight":
            a = a.T
        node = variables
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = jnp.asarray(np.ascontiguousarray(a))
    if num_classes is not None and num_classes != ckpt_classes:
        key = random.PRNGKey(0) if rng is None else rng
        feat = variables["params"]["Dense_0"]["kernel"].shape[0]
        variables["params"]["Dense_0"] = {
            "kernel": initializers.lecun_normal()(key, (feat, num_classes), jnp.float32),
            "bias": jnp.zeros((num_classes,), jnp.float32)}
    return variables


# torchvision's Swin (v1) and ViT configurations: arch -> the podlet model's keyword arguments
_SWIN_ARCHS = {"swin_t": {"embed_dim": 96, "depths": (2, 2, 6, 2), "num_heads": (3, 6, 12, 24), "window_size": 7},
               "swin_s": {"embed_dim": 96, "depths": (2, 2, 18, 2), "num_heads": (3, 6, 12, 24), "window_size": 7}}
_VIT_ARCHS = {"vit_b_16": {"patch_size": 16, "hidden_size": 768, "num_layers": 12, "num_heads": 12, "mlp_dim": 3072},
              "vit_b_32": {"patch_size": 32, "hidden_size": 768, "num_layers": 12, "num_heads": 12, "mlp_dim": 3072}}


def _arch_spec(arch, table, family):
    """The keyword arguments of `arch`: a name of `table`, or a mapping with exactly the
    same keys (a reduced layout, e.g. for tests)."""
    if isinstance(arch, str):
        try:
            return dict(table[arch.lower()])
        except KeyError:
            raise PodletError(f"unknown {family} arch {arch!r}; expected one of {sorted(table)} or a mapping of "
                              f"{sorted(next(iter(table.values())))}") from None
    keys = set(next(iter(table.values())))
    if not hasattr(arch, "items") or set(arch) != keys:
        got = sorted(arch) if hasattr(arch, "items") else type(arch).__name__
        raise PodletError(f"{family} arch: expected one of {sorted(table)} or a mapping of exactly {sorted(keys)}, "
                          f"got {got}")
    return {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in arch.items()}


def _hwio(a):
    return a.transpose(2, 3, 1, 0)  # torch OIHW -> HWIO


def _linear(a):
    return a.T  # torch (out, in) -> Dense kernel (in, out)


def _same(a):
    return a


def torchvision_swin_layout(arch="swin_t", in_channels: int = 3, num_classes: int = 1000):
    """``{torch key: (torch shape, [(podlet path, convert), ...])}`` of torchvision's Swin
    (v1) state_dict for `arch` ('swin_t', 'swin_s' or a mapping of embed_dim, depths,
    num_heads, window_size). ``relative_position_index`` buffers map to no variable (they
    are recomputed; the loader checks their values)."""
    a = _arch_spec(arch, _SWIN_ARCHS, "Swin")
    e, ws = a["embed_dim"], a["window_size"]
    layout = {}

    def put(tkey, shape, path, fn=_same):
        layout[tkey] = (tuple(shape), [(("params", *path), fn)] if path else [])

    def norm(tkey, path, c):
        put(f"{tkey}.weight", (c,), (*path, "scale"))
        put(f"{tkey}.bias", (c,), (*path, "bias"))

    def dense(tkey, path, o, i, bias=True):
        put(f"{tkey}.weight", (o, i), (*path, "kernel"), _linear)
        if bias:
            put(f"{tkey}.bias", (o,), (*path, "bias"))

    put("features.0.0.weight", (e, in_channels, 4, 4), ("patch_embed", "kernel"), _hwio)
    put("features.0.0.bias", (e,), ("patch_embed", "bias"))
    norm("features.0.2", ("patch_norm",), e)
    n_stages = len(a["depths"])
    for s, (depth, heads) in enumerate(zip(a["depths"], a["num_heads"])):
        c = e * 2 ** s
        for j in range(depth):
            t, p = f"features.{2 * s + 1}.{j}", f"stage_{s}_block_{j}"
            norm(f"{t}.norm1", (p, "norm1"), c)
            dense(f"{t}.attn.qkv", (p, "attn", "qkv"), 3 * c, c)
            dense(f"{t}.attn.proj", (p, "attn", "proj"), c, c)
            put(f"{t}.attn.relative_position_bias_table", ((2 * ws - 1) ** 2, heads),
                (p, "attn", "relative_position_bias_table"))
            put(f"{t}.attn.relative_position_index", (ws ** 4,), None)
            norm(f"{t}.norm2", (p, "norm2"), c)
            dense(f"{t}.mlp.0", (p, "mlp", "fc1"), 4 * c, c)
            dense(f"{t}.mlp.3", (p, "mlp", "fc2"), c, 4 * c)
        if s < n_stages - 1:
            t = f"features.{2 * s + 2}"
            dense(f"{t}.reduction", (f"merge_{s}", "reduction"), 2 * c, 4 * c, bias=False)
            norm(f"{t}.norm", (f"merge_{s}", "norm"), 4 * c)
    c = e * 2 ** (n_stages - 1)
    norm("norm", ("norm",), c)
    dense("head", ("head",), num_classes, c)
    return layout


def torchvision_vit_layout(arch="vit_b_16", in_channels: int = 3, num_classes: int = 1000, seq_length: int = 197):
    """``{torch key: (torch shape, [(podlet path, convert), ...])}`` of torchvision's
    VisionTransformer state_dict for `arch` ('vit_b_16', 'vit_b_32' or a mapping of
    patch_size, hidden_size, num_layers, num_heads, mlp_dim) into podlet's
    ``VisionTransformer``. `seq_length` is 1 + the number of patches (197 at 224 px, /16).
    ``in_proj_weight``/``in_proj_bias`` split into the query, key and value projections."""
    a = _arch_spec(arch, _VIT_ARCHS, "ViT")
    d, p, heads = a["hidden_size"], a["patch_size"], a["num_heads"]
    if d % heads:
        raise PodletError(f"ViT arch: hidden_size {d} is not divisible by num_heads {heads}")
    hd = d // heads
    layout = {}

    def put(tkey, shape, targets):
        layout[tkey] = (tuple(shape), [(("params", *path), fn) for path, fn in targets])

    def norm(tkey, path):
        put(f"{tkey}.weight", (d,), [((*path, "scale"), _same)])
        put(f"{tkey}.bias", (d,), [((*path, "bias"), _same)])

    def split(i, fn):
        return lambda w: fn(w[i * d:(i + 1) * d])

    put("class_token", (1, 1, d), [(("cls",), _same)])
    put("conv_proj.weight", (d, in_channels, p, p), [(("embedding", "kernel"), _hwio)])
    put("conv_proj.bias", (d,), [(("embedding", "bias"), _same)])
    put("encoder.pos_embedding", (1, seq_length, d), [(("Transformer", "posembed_input", "pos_embedding"), _same)])
    for i in range(a["num_layers"]):
        t, q = f"encoder.layers.encoder_layer_{i}", ("Transformer", f"encoderblock_{i}")
        mha = (*q, "MultiHeadDotProductAttention_0")
        norm(f"{t}.ln_1", (*q, "LayerNorm_0"))
        put(f"{t}.self_attention.in_proj_weight", (3 * d, d),
            [((*mha, name, "kernel"), split(j, lambda w: w.T.reshape(d, heads, hd)))
             for j, name in enumerate(("query", "key", "value"))])
        put(f"{t}.self_attention.in_proj_bias", (3 * d,),
            [((*mha, name, "bias"), split(j, lambda b: b.reshape(heads, hd)))
             for j, name in enumerate(("query", "key", "value"))])
        put(f"{t}.self_attention.out_proj.weight", (d, d), [((*mha, "out", "kernel"), lambda w: w.T.reshape(heads, hd, d))])
        put(f"{t}.self_attention.out_proj.bias", (d,), [((*mha, "out", "bias"), _same)])
        norm(f"{t}.ln_2", (*q, "LayerNorm_1"))
        for k, (o, i_) in enumerate([(a["mlp_dim"], d), (d, a["mlp_dim"])]):
            put(f"{t}.mlp.{3 * k}.weight", (o, i_), [((*q, "MlpBlock_0", f"Dense_{k}", "kernel"), _linear)])
            put(f"{t}.mlp.{3 * k}.bias", (o,), [((*q, "MlpBlock_0", f"Dense_{k}", "bias"), _same)])
    norm("encoder.ln", ("Transformer", "encoder_norm"))
    put("heads.head.weight", (num_classes, d), [(("head", "kernel"), _linear)])
    put("heads.head.bias", (num_classes,), [(("head", "bias"), _same)])
    return layout


def _dim(sd, key, axis, default):
    """Size of `axis` of the state_dict entry `key` (to read a checkpoint's classes and
    input channels), `default` when it is absent or has too few dimensions (the key check
    then names it)."""
    v = sd.get(key)
    if v is None:
        return default
    shape = _as_numpy(key, v).shape
    return shape[axis] if len(shape) > axis else default


def _assemble(arrays, layout, stem_key, in_channels):
    """Nested ``{'params': ...}`` of podlet Arrays from the checked torch arrays."""
    variables = {}
    for k, (_, targets) in layout.items():
        a = arrays[k].astype(np.float32)
        if k == stem_key:
            a = _adapt_stem(a, in_channels)
        for path, fn in targets:
            node = variables
            for p in path[:-1]:
                node = node.setdefault(p, {})
            node[path[-1]] = jnp.asarray(np.ascontiguousarray(fn(a)))
    return variables


def _new_head(variables, num_classes, rng):
    """Replaces ``params/head`` by a truncated-normal(0.02) kernel drawn from `rng`
    (default ``PRNGKey(0)``) and a zero bias (torchvision's Linear initialisation for
    Swin and timm's for ViT heads)."""
    key = random.PRNGKey(0) if rng is None else rng
    feat = variables["params"]["head"]["kernel"].shape[0]
    variables["params"]["head"] = {
        "kernel": initializers.truncated_normal(stddev=0.02)(key, (feat, num_classes), jnp.float32),
        "bias": jnp.zeros((num_classes,), jnp.float32)}


def load_torchvision_swin(path_or_state_dict, arch="swin_t", in_channels: int = 1, num_classes=None, rng=None):
    """Variables ``{'params'}`` for ``podlet.models.SwinT`` / ``SwinS`` from a torchvision
    ``swin_t`` / ``swin_s`` (v1) state_dict (a .pth path or a mapping of tensors/arrays).

    Args:
      path_or_state_dict: ``torch.save(model.state_dict(), path)`` output, or the dict.
      arch: 'swin_t', 'swin_s', or a mapping ``{embed_dim, depths, num_heads, window_size}``
        for another layout of the same code.
      in_channels: input channels of the podlet model; the 3-channel patch embedding is
        summed over its input channels for 1 (a gray image seen as R=G=B gives the same
        activations), repeated and rescaled for other counts.
      num_classes: logits of the podlet model; None keeps the checkpoint's head. When it
        differs, the head is re-initialised from `rng` (truncated normal 0.02, zero bias).
      rng: key for that head (default ``PRNGKey(0)``).

    The ``relative_position_index`` buffers must hold torchvision's index (podlet
    recomputes it). Build the model with the same arch: ``SwinT(num_classes=...,
    in_channels=...)``. Raises PodletError naming every missing, unexpected and mis-shaped
    key at once.
    """
    sd, where = _read_state_dict(path_or_state_dict)
    ckpt_classes = _dim(sd, "head.weight", 0, 1000)
    ckpt_in = _dim(sd, "features.0.0.weight", 1, 3)
    layout = torchvision_swin_layout(arch, in_channels=ckpt_in, num_classes=ckpt_classes)
    what = f"torchvision {arch if isinstance(arch, str) else 'Swin'}"
    arrays = _checked_arrays(sd, {k: shape for k, (shape, _) in layout.items()}, where, what)
    ws = _arch_spec(arch, _SWIN_ARCHS, "Swin")["window_size"]
    from .swin import relative_position_index
    want = relative_position_index(ws)
    bad = [k for k in layout if k.endswith("relative_position_index") and not np.array_equal(arrays[k], want)]
    if bad:
        raise PodletError(f"{where}: {bad} do not hold the relative position index of {ws}x{ws} windows "
                          f"(torchvision's relative_position_index buffer)")
    variables = _assemble(arrays, layout, "features.0.0.weight", in_channels)
    if num_classes is not None and num_classes != ckpt_classes:
        _new_head(variables, num_classes, rng)
    return variables


def load_torchvision_vit(path_or_state_dict, arch="vit_b_16", in_channels: int = 1, num_classes=None, rng=None):
    """Variables ``{'params'}`` for ``podlet.models.ViTB16`` / ``ViTB32`` from a torchvision
    ``vit_b_16`` / ``vit_b_32`` state_dict (a .pth path or a mapping of tensors/arrays).

    Args:
      path_or_state_dict: ``torch.save(model.state_dict(), path)`` output, or the dict.
      arch: 'vit_b_16', 'vit_b_32', or a mapping ``{patch_size, hidden_size, num_layers,
        num_heads, mlp_dim}`` for another layout of the same code.
      in_channels, num_classes, rng: as in ``load_torchvision_swin`` (grayscale by summing
        the RGB patch-embedding filters; a new truncated-normal head when the class count
        differs).

    The position embeddings fix the image size: apply the model to images of the size the
    checkpoint was trained at (224 for torchvision's weights). torchvision's ViT uses the
    exact GELU, as ``ViTB16``/``ViTB32`` do (``approximate_gelu=False``). Raises
    PodletError naming every missing, unexpected and mis-shaped key at once.
    """
    sd, where = _read_state_dict(path_or_state_dict)
    ckpt_classes = _dim(sd, "heads.head.weight", 0, 1000)
    ckpt_in = _dim(sd, "conv_proj.weight", 1, 3)
    spec = _arch_spec(arch, _VIT_ARCHS, "ViT")
    seq = _dim(sd, "encoder.pos_embedding", 1, (224 // spec["patch_size"]) ** 2 + 1)
    layout = torchvision_vit_layout(arch, in_channels=ckpt_in, num_classes=ckpt_classes, seq_length=seq)
    what = f"torchvision {arch if isinstance(arch, str) else 'ViT'}"
    arrays = _checked_arrays(sd, {k: shape for k, (shape, _) in layout.items()}, where, what)
    variables = _assemble(arrays, layout, "conv_proj.weight", in_channels)
    if num_classes is not None and num_classes != ckpt_classes:
        _new_head(variables, num_classes, rng)
    return variables


def _check_structure(tree, target, where):
    """Names every path of `target` missing from `tree`, every extra path, and every
    leaf whose shape differs, in one error."""
    got = dict(tree_util.tree_flatten_with_path(tree)[0])
    want = dict(tree_util.tree_flatten_with_path(target)[0])
    fmt = tree_util.keystr
    missing = [fmt(p) for p in want if p not in got]
    extra = [fmt(p) for p in got if p not in want]
    bad = [f"{fmt(p)}: got {tuple(np.shape(got[p]))}, expected {tuple(want[p].shape)}"
           for p in want if p in got and tuple(np.shape(got[p])) != tuple(want[p].shape)]
    if missing or extra or bad:
        parts = ([f"missing {missing}"] if missing else []) + ([f"unexpected {extra}"] if extra else []) + \
                ([f"mis-shaped [{'; '.join(bad)}]"] if bad else [])
        raise PodletError(f"{where} does not match the expected structure: " + ", ".join(parts))


def load_flax_params(path, target=None):
    """The pytree saved by ``flax.serialization.to_bytes`` (or ``msgpack_serialize``) at
    `path`, as nested dicts of podlet Arrays (lists come back as dicts keyed '0', '1',
    ... as Flax's state dicts store them). With `target` (a pytree of arrays or
    ShapeDtypeStructs, e.g. ``model.init``'s variables) every missing, unexpected or
    mis-shaped path is named in one error."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Flax checkpoint {path!r} does not exist")
    with open(path, "rb") as f:
        tree = _flax_msgpack.restore(f.read(), where=path)
    if not isinstance(tree, dict):
        raise PodletError(f"{path}: expected a msgpack map of variables at the top level, got {type(tree).__name__}")

    def convert(x):
        if isinstance(x, dict):
            return {k: convert(v) for k, v in x.items()}
        if isinstance(x, (np.ndarray, np.generic)):
            return jnp.asarray(x)
        return x
    tree = convert(tree)
    if target is not None:
        _check_structure(tree, target, path)
    return tree


_COLLECTIONS = ("params", "batch_stats")
# podlet model name (``MODELS``, the config's model.architecture) or torchvision name -> its loader and arch
_TORCHVISION = {**{n: (load_torchvision_resnet, n) for n in _ARCHS},
                "swin_tiny": (load_torchvision_swin, "swin_t"), "swin_t": (load_torchvision_swin, "swin_t"),
                "swin_small": (load_torchvision_swin, "swin_s"), "swin_s": (load_torchvision_swin, "swin_s"),
                "vit_b16": (load_torchvision_vit, "vit_b_16"), "vit_b_16": (load_torchvision_vit, "vit_b_16"),
                "vit_b32": (load_torchvision_vit, "vit_b_32"), "vit_b_32": (load_torchvision_vit, "vit_b_32")}


def load_pretrained(path, model_name: str, *, in_channels: int = 1, num_classes=None, rng=None, target=None):
    """Variables to initialise `model_name` from a pretrained file (the ``train.init_from``
    config key): a torchvision .pth/.pt state_dict (model_name resnet18/34/50, swin_tiny/small,
    vit_b16/b32; torchvision's names swin_t, vit_b_16, ... too) or a Flax
    msgpack file (``.msgpack``/``.flax``: ``to_bytes`` of the variables, of the params
    alone, or of a TrainState). With `target` (``model.init``'s variables) a Flax file
    is checked path by path and shape by shape. Returns ``{'params', 'batch_stats'?}``."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext in (".pth", ".pt"):
        try:
            loader, arch = _TORCHVISION[str(model_name).lower()]
        except KeyError:
            raise PodletError(f"pretrained weights {path!r}: no torchvision layout for model {model_name!r}; "
                              f"expected one of {sorted(_TORCHVISION)}") from None
        return loader(path, arch, in_channels=in_channels, num_classes=num_classes, rng=rng)
    if ext in (".msgpack", ".flax"):
        tree = load_flax_params(path)
        if "params" in tree:   # variables or a TrainState: keep what a model's apply takes
            tree = {k: tree[k] for k in _COLLECTIONS if k in tree}
        else:                  # the params dict alone
            tree = {"params": tree}
        if target is not None:
            _check_structure(tree, {k: target[k] for k in tree if k in target}, path)
        return tree
    raise PodletError(f"pretrained weights {path!r}: unknown file type {ext!r}; expected a torchvision "
                      "state_dict (.pth, .pt) or a Flax msgpack file (.msgpack, .flax)")
