"""Pretrained weights into podlet.models: torchvision and timm state_dicts, Flax msgpack files.

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

timm's layouts load into the same variables: ``load_timm_swin``
(``swin_tiny_patch4_window7_224`` ...: ``patch_embed.proj``/``.norm``,
``layers.{s}.blocks.{j}``, ``layers.{s}.downsample`` at the start of stages 1..3 in timm
>= 0.9 or at the end of stages 0..2 before, ``head.fc`` or ``head``) and ``load_timm_vit``
(``vit_{tiny,small,base}_patch16_224``, ``vit_base_patch32_224``: ``cls_token``,
``pos_embed``, ``blocks.{i}.attn.qkv`` split like ``in_proj_weight``). ``load_pretrained``
(``train.init_from``) tells the two layouts apart by their keys. A ViT checkpoint loads
into a model at another image size with ``image_size=``: its position embeddings are
resized bicubically as its library does (``resample_pos_embed``).
"""
import os

import numpy as np

from .. import numpy as jnp
from .. import random
from .. import tree_util
from .._src.errors import PodletError
from ..nn import initializers
from . import _flax_msgpack, _torch_pth

__all__ = ["load_torchvision_resnet", "load_torchvision_swin", "load_torchvision_vit", "load_timm_swin",
           "load_timm_vit", "load_flax_params", "load_pretrained", "resample_pos_embed", "torchvision_resnet_layout",
           "torchvision_swin_layout", "torchvision_vit_layout", "timm_swin_layout", "timm_vit_layout"]

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


def _checked_arrays(sd, shapes, where, what, optional=()):
    """``{key: numpy array}`` of the state_dict `sd` when its keys are exactly those of
    `shapes` ``{key: torch shape}`` with those shapes (the keys in `optional` may be
    absent; a shape None is not checked); otherwise one PodletError naming every missing,
    unexpected and mis-shaped key."""
    missing = [k for k in shapes if k not in sd and k not in optional]
    unexpected = [k for k in sd if k not in shapes]
    misshaped = []
    arrays = {}
    for k, shape in shapes.items():
        if k in sd:
            arrays[k] = _as_numpy(k, sd[k])
            if shape is not None and arrays[k].shape != tuple(shape):
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


# torchvision's and timm's Swin (v1) and ViT configurations: arch -> the podlet model's keyword arguments
_SWIN_ARCHS = {"swin_t": {"embed_dim": 96, "depths": (2, 2, 6, 2), "num_heads": (3, 6, 12, 24), "window_size": 7},
               "swin_s": {"embed_dim": 96, "depths": (2, 2, 18, 2), "num_heads": (3, 6, 12, 24), "window_size": 7}}
_VIT_ARCHS = {"vit_b_16": {"patch_size": 16, "hidden_size": 768, "num_layers": 12, "num_heads": 12, "mlp_dim": 3072},
              "vit_b_32": {"patch_size": 32, "hidden_size": 768, "num_layers": 12, "num_heads": 12, "mlp_dim": 3072}}
_TIMM_SWIN_ARCHS = {"swin_tiny_patch4_window7_224": _SWIN_ARCHS["swin_t"],
                    "swin_small_patch4_window7_224": _SWIN_ARCHS["swin_s"],
                    "swin_base_patch4_window7_224": {"embed_dim": 128, "depths": (2, 2, 18, 2),
                                                     "num_heads": (4, 8, 16, 32), "window_size": 7}}
_TIMM_VIT_ARCHS = {"vit_tiny_patch16_224": {"patch_size": 16, "hidden_size": 192, "num_layers": 12, "num_heads": 3,
                                            "mlp_dim": 768},
                   "vit_small_patch16_224": {"patch_size": 16, "hidden_size": 384, "num_layers": 12, "num_heads": 6,
                                             "mlp_dim": 1536},
                   "vit_base_patch16_224": _VIT_ARCHS["vit_b_16"],
                   "vit_base_patch32_224": _VIT_ARCHS["vit_b_32"]}


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


# Swin key layouts. The templates are formatted with s (stage), j (block in the stage),
# b = 2s + 1 and m = 2s + 2 (torchvision's features.{b} is stage s, features.{m} the patch
# merging after it) and n = s + 1. timm's merging sits at the end of stage s (timm < 0.9:
# layers.{s}.downsample, s = 0..2) or at the start of the next one (timm >= 0.9:
# layers.{s+1}.downsample); all three concatenate each 2x2 neighbourhood as
# [(0,0), (1,0), (0,1), (1,1)] (row, column), which is podlet's PatchMerging order.
_TV_SWIN_NAMES = {"what": "torchvision", "embed": "features.0.0", "embed_norm": "features.0.2",
                  "block": "features.{b}.{j}", "mlp": ("mlp.0", "mlp.3"), "merge": "features.{m}", "head": "head"}
_TIMM_DOWNSAMPLE = {"start": "layers.{n}.downsample", "end": "layers.{s}.downsample"}
_TIMM_HEADS = ("head.fc", "head")


def _timm_swin_names(downsample, head):
    if downsample not in _TIMM_DOWNSAMPLE:
        raise PodletError(f"timm Swin downsample={downsample!r}: expected 'start' (timm >= 0.9: "
                          f"layers.{{s+1}}.downsample) or 'end' (timm < 0.9: layers.{{s}}.downsample); "
                          f"load_timm_swin also takes 'auto'")
    if head not in _TIMM_HEADS:
        raise PodletError(f"timm Swin head={head!r}: expected 'head.fc' (timm >= 0.9) or 'head' (timm < 0.9); "
                          f"load_timm_swin also takes 'auto'")
    return {"what": "timm", "embed": "patch_embed.proj", "embed_norm": "patch_embed.norm",
            "block": "layers.{s}.blocks.{j}", "mlp": ("mlp.fc1", "mlp.fc2"), "merge": _TIMM_DOWNSAMPLE[downsample],
            "head": head}


def _swin_layout(a, names, in_channels, num_classes):
    e, ws = a["embed_dim"], a["window_size"]
    timm = names["what"] == "timm"
    layout = {}

    def put(tkey, shape, path, fn=_same):
        layout[tkey] = (None if shape is None else tuple(shape), [(("params", *path), fn)] if path else [])

    def norm(tkey, path, c):
        put(f"{tkey}.weight", (c,), (*path, "scale"))
        put(f"{tkey}.bias", (c,), (*path, "bias"))

    def dense(tkey, path, o, i, bias=True):
        put(f"{tkey}.weight", (o, i), (*path, "kernel"), _linear)
        if bias:
            put(f"{tkey}.bias", (o,), (*path, "bias"))

    put(f"{names['embed']}.weight", (e, in_channels, 4, 4), ("patch_embed", "kernel"), _hwio)
    put(f"{names['embed']}.bias", (e,), ("patch_embed", "bias"))
    norm(names["embed_norm"], ("patch_norm",), e)
    n_stages = len(a["depths"])
    for s, (depth, heads) in enumerate(zip(a["depths"], a["num_heads"])):
        c = e * 2 ** s
        fmt = {"s": s, "b": 2 * s + 1, "m": 2 * s + 2, "n": s + 1}
        for j in range(depth):
            t, p = names["block"].format(j=j, **fmt), f"stage_{s}_block_{j}"
            norm(f"{t}.norm1", (p, "norm1"), c)
            dense(f"{t}.attn.qkv", (p, "attn", "qkv"), 3 * c, c)
            dense(f"{t}.attn.proj", (p, "attn", "proj"), c, c)
            put(f"{t}.attn.relative_position_bias_table", ((2 * ws - 1) ** 2, heads),
                (p, "attn", "relative_position_bias_table"))
            # buffers podlet recomputes: torchvision's index is flat, timm's (N, N); timm < 0.9
            # also saved the shifted-window mask of its training resolution
            put(f"{t}.attn.relative_position_index", (ws * ws, ws * ws) if timm else (ws ** 4,), None)
            if timm:
                put(f"{t}.attn_mask", None, None)
            norm(f"{t}.norm2", (p, "norm2"), c)
            dense(f"{t}.{names['mlp'][0]}", (p, "mlp", "fc1"), 4 * c, c)
            dense(f"{t}.{names['mlp'][1]}", (p, "mlp", "fc2"), c, 4 * c)
        if s < n_stages - 1:
            t = names["merge"].format(**fmt)
            dense(f"{t}.reduction", (f"merge_{s}", "reduction"), 2 * c, 4 * c, bias=False)
            norm(f"{t}.norm", (f"merge_{s}", "norm"), 4 * c)
    c = e * 2 ** (n_stages - 1)
    norm("norm", ("norm",), c)
    dense(names["head"], ("head",), num_classes, c)
    return layout


def torchvision_swin_layout(arch="swin_t", in_channels: int = 3, num_classes: int = 1000):
    """``{torch key: (torch shape, [(podlet path, convert), ...])}`` of torchvision's Swin
    (v1) state_dict for `arch` ('swin_t', 'swin_s' or a mapping of embed_dim, depths,
    num_heads, window_size). ``relative_position_index`` buffers map to no variable (they
    are recomputed; the loader checks their values)."""
    return _swin_layout(_arch_spec(arch, _SWIN_ARCHS, "Swin"), _TV_SWIN_NAMES, in_channels, num_classes)


def timm_swin_layout(arch="swin_tiny_patch4_window7_224", in_channels: int = 3, num_classes: int = 1000,
                     downsample: str = "start", head: str = "head.fc"):
    """``{torch key: (torch shape, [(podlet path, convert), ...])}`` of timm's
    SwinTransformer (v1) state_dict for `arch` ('swin_tiny_patch4_window7_224',
    'swin_small_...', 'swin_base_...' or a mapping of embed_dim, depths, num_heads,
    window_size). `downsample` 'start' is timm >= 0.9 (``layers.{s}.downsample`` at the start
    of stages 1..3), 'end' older timm (at the end of stages 0..2); `head` 'head.fc'
    (timm >= 0.9) or 'head'. The buffers ``attn.relative_position_index`` (N, N) and
    ``attn_mask`` (shape None: any) map to no variable; timm >= 0.9 does not save them."""
    return _swin_layout(_arch_spec(arch, _TIMM_SWIN_ARCHS, "timm Swin"), _timm_swin_names(downsample, head),
                        in_channels, num_classes)


# ViT key layouts; block templates are formatted with i (the block). torchvision's
# in_proj and timm's qkv are both [query; key; value] along the output axis, each
# (heads, head_dim) head-major, so one split serves both.
_TV_VIT_NAMES = {"what": "torchvision", "cls": "class_token", "pos": "encoder.pos_embedding", "embed": "conv_proj",
                 "block": "encoder.layers.encoder_layer_{i}", "ln1": "ln_1", "qkv": "self_attention.in_proj_{}",
                 "out": "self_attention.out_proj", "ln2": "ln_2", "mlp": ("mlp.0", "mlp.3"), "norm": "encoder.ln",
                 "head": "heads.head"}
_TIMM_VIT_NAMES = {"what": "timm", "cls": "cls_token", "pos": "pos_embed", "embed": "patch_embed.proj",
                   "block": "blocks.{i}", "ln1": "norm1", "qkv": "attn.qkv.{}", "out": "attn.proj", "ln2": "norm2",
                   "mlp": ("mlp.fc1", "mlp.fc2"), "norm": "norm", "head": "head"}


def _vit_layout(a, names, in_channels, num_classes, seq_length):
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

    put(names["cls"], (1, 1, d), [(("cls",), _same)])
    put(f"{names['embed']}.weight", (d, in_channels, p, p), [(("embedding", "kernel"), _hwio)])
    put(f"{names['embed']}.bias", (d,), [(("embedding", "bias"), _same)])
    put(names["pos"], (1, seq_length, d), [(("Transformer", "posembed_input", "pos_embedding"), _same)])
    for i in range(a["num_layers"]):
        t, q = names["block"].format(i=i), ("Transformer", f"encoderblock_{i}")
        mha = (*q, "MultiHeadDotProductAttention_0")
        norm(f"{t}.{names['ln1']}", (*q, "LayerNorm_0"))
        put(f"{t}.{names['qkv'].format('weight')}", (3 * d, d),
            [((*mha, name, "kernel"), split(j, lambda w: w.T.reshape(d, heads, hd)))
             for j, name in enumerate(("query", "key", "value"))])
        put(f"{t}.{names['qkv'].format('bias')}", (3 * d,),
            [((*mha, name, "bias"), split(j, lambda b: b.reshape(heads, hd)))
             for j, name in enumerate(("query", "key", "value"))])
        put(f"{t}.{names['out']}.weight", (d, d), [((*mha, "out", "kernel"), lambda w: w.T.reshape(heads, hd, d))])
        put(f"{t}.{names['out']}.bias", (d,), [((*mha, "out", "bias"), _same)])
        norm(f"{t}.{names['ln2']}", (*q, "LayerNorm_1"))
        for k, (o, i_) in enumerate([(a["mlp_dim"], d), (d, a["mlp_dim"])]):
            put(f"{t}.{names['mlp'][k]}.weight", (o, i_), [((*q, "MlpBlock_0", f"Dense_{k}", "kernel"), _linear)])
            put(f"{t}.{names['mlp'][k]}.bias", (o,), [((*q, "MlpBlock_0", f"Dense_{k}", "bias"), _same)])
    norm(names["norm"], ("Transformer", "encoder_norm"))
    put(f"{names['head']}.weight", (num_classes, d), [(("head", "kernel"), _linear)])
    put(f"{names['head']}.bias", (num_classes,), [(("head", "bias"), _same)])
    return layout


def torchvision_vit_layout(arch="vit_b_16", in_channels: int = 3, num_classes: int = 1000, seq_length: int = 197):
    """``{torch key: (torch shape, [(podlet path, convert), ...])}`` of torchvision's
    VisionTransformer state_dict for `arch` ('vit_b_16', 'vit_b_32' or a mapping of
    patch_size, hidden_size, num_layers, num_heads, mlp_dim) into podlet's
    ``VisionTransformer``. `seq_length` is 1 + the number of patches (197 at 224 px, /16).
    ``in_proj_weight``/``in_proj_bias`` split into the query, key and value projections."""
    return _vit_layout(_arch_spec(arch, _VIT_ARCHS, "ViT"), _TV_VIT_NAMES, in_channels, num_classes, seq_length)


def timm_vit_layout(arch="vit_tiny_patch16_224", in_channels: int = 3, num_classes: int = 1000,
                    seq_length: int = 197):
    """``{torch key: (torch shape, [(podlet path, convert), ...])}`` of timm's
    VisionTransformer state_dict (class token, ``global_pool='token'``, no layer scale) for
    `arch` ('vit_tiny_patch16_224', 'vit_small_patch16_224', 'vit_base_patch16_224',
    'vit_base_patch32_224' or a mapping of patch_size, hidden_size, num_layers, num_heads,
    mlp_dim): ``cls_token``, ``pos_embed``, ``patch_embed.proj``, ``blocks.{i}.norm1`` /
    ``attn.qkv`` (split into query, key, value) / ``attn.proj`` / ``norm2`` / ``mlp.fc1`` /
    ``mlp.fc2``, ``norm``, ``head``."""
    return _vit_layout(_arch_spec(arch, _TIMM_VIT_ARCHS, "timm ViT"), _TIMM_VIT_NAMES, in_channels, num_classes,
                       seq_length)


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
    """Nested ``{'params': ...}`` of podlet Arrays from the checked torch arrays (optional
    keys the checkpoint lacks are skipped; they map to no variable)."""
    variables = {}
    for k, (_, targets) in layout.items():
        if k not in arrays:
            continue
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


# ------------------------------------------------------------- position-embedding resampling

def _cubic(x, a):
    """Keys' cubic convolution kernel with parameter `a` (torch: -0.75, its antialiased path -0.5)."""
    x = np.abs(x)
    return np.where(x <= 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, 0.0))


def _bicubic_weights(n_in, n_out, align_corners, antialias):
    """``(n_out, n_in)`` matrix of ``torch.nn.functional.interpolate(mode='bicubic')`` along
    one axis. Plain: source coordinate ``i * (n_in - 1) / (n_out - 1)`` (align_corners) or
    ``(i + 0.5) * n_in / n_out - 0.5``, four taps with a = -0.75, indices past the border
    clamped to it. Antialiased (PIL's filter, as torch computes it): a = -0.5, the kernel
    stretched by the scale when shrinking, taps clipped to the input and the weights
    renormalised."""
    m = np.zeros((n_out, n_in), np.float64)
    out = np.arange(n_out)
    if antialias:
        scale = n_in / n_out
        support, inv = (2.0 * scale, 1.0 / scale) if scale >= 1.0 else (2.0, 1.0)
        for i in out:
            center = scale * (i + 0.5)
            lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
            w = _cubic((np.arange(lo, hi) - center + 0.5) * inv, -0.5)
            m[i, lo:hi] = w / w.sum() if w.sum() != 0 else w
        return m
    if align_corners:
        src = out * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        src = (out + 0.5) * (n_in / n_out) - 0.5
    first = np.floor(src).astype(np.int64)
    t = src - first
    for k in range(-1, 3):
        np.add.at(m, (out, np.clip(first + k, 0, n_in - 1)), _cubic(t - k, -0.75))
    return m


def _grid_pair(value, what):
    grid = (value, value) if isinstance(value, (int, np.integer)) else value
    if (not isinstance(grid, (tuple, list)) or len(grid) != 2 or
            not all(isinstance(g, (int, np.integer)) and not isinstance(g, bool) and g >= 1 for g in grid)):
        raise PodletError(f"{what}: expected a positive int or (rows, columns) of positive ints, got {value!r}")
    return int(grid[0]), int(grid[1])


def resample_pos_embed(pos_embed, new_grid, *, num_prefix_tokens: int = 1, old_grid=None,
                       align_corners: bool = False, antialias: bool = False):
    """ViT position embeddings for another patch grid: ``(1, prefix + h * w, d)`` (the h x w
    grid row-major after `num_prefix_tokens` class tokens, which are kept as they are) ->
    ``(1, prefix + h' * w', d)`` float32, the grid resized bicubically to `new_grid`
    ``(h', w')`` (an int for a square grid). `old_grid` defaults to the square grid the
    length implies.

    The interpolation is ``torch.nn.functional.interpolate(mode='bicubic')``'s, so a model
    at another image size starts where torch's would:

    * ``align_corners=True`` is torchvision's ``interpolate_embeddings`` (vit_b_16 at 384 px);
    * ``antialias=True`` (align_corners False) is timm's ``resample_abs_pos_embed`` as timm
      >= 0.9 calls it when loading a checkpoint into a model of another ``img_size``;
    * neither is timm's older ``resize_pos_embed``.
    """
    a = np.asarray(pos_embed, np.float32)
    if a.ndim != 3 or a.shape[0] != 1:
        raise PodletError(f"resample_pos_embed: expected position embeddings of shape (1, tokens, width), "
                          f"got {a.shape}")
    if not 0 <= num_prefix_tokens < a.shape[1]:
        raise PodletError(f"resample_pos_embed: num_prefix_tokens={num_prefix_tokens} for {a.shape[1]} tokens")
    if antialias and align_corners:
        raise PodletError("resample_pos_embed: antialias=True takes align_corners=False (as timm); "
                          "align_corners=True is torchvision's plain bicubic")
    n = a.shape[1] - num_prefix_tokens
    if old_grid is None:
        side = int(round(np.sqrt(n)))
        if side * side != n:
            raise PodletError(f"resample_pos_embed: {n} grid tokens ({a.shape[1]} minus {num_prefix_tokens} prefix) "
                              f"are not a square grid; pass old_grid=(rows, columns)")
        old_grid = (side, side)
    h, w = _grid_pair(old_grid, "resample_pos_embed old_grid")
    h2, w2 = _grid_pair(new_grid, "resample_pos_embed new_grid")
    if h * w != n:
        raise PodletError(f"resample_pos_embed: old_grid {h}x{w} has {h * w} tokens, the embeddings {n}")
    if (h, w) == (h2, w2):
        return a
    g = a[0, num_prefix_tokens:].reshape(h, w, -1).astype(np.float64)
    g = np.einsum("Yy,Xx,yxc->YXc", _bicubic_weights(h, h2, align_corners, antialias),
                  _bicubic_weights(w, w2, align_corners, antialias), g)
    return np.concatenate([a[:, :num_prefix_tokens], g.reshape(1, h2 * w2, -1).astype(np.float32)], axis=1)


def _image_grid(image_size, patch):
    """The patch grid (rows, columns) of `image_size` (an int, (height, width) or
    (height, width, channels), as the config's ``data.image_size``)."""
    size = image_size
    if isinstance(size, (tuple, list)) and len(size) == 3:
        size = tuple(size[:2])
    h, w = _grid_pair(size, "image_size")
    if h < patch or w < patch:
        raise PodletError(f"image_size {h}x{w} is smaller than one {patch}x{patch} patch")
    return h // patch, w // patch


# ------------------------------------------------------------------------- the loaders

def _is_timm(sd, family):
    """Whether the keys of `sd` are timm's layout of `family` ('vit' or 'swin') rather
    than torchvision's."""
    if family == "vit":
        return any(k in sd for k in ("cls_token", "pos_embed", "patch_embed.proj.weight")) or \
            any(k.startswith("blocks.") for k in sd)
    return "patch_embed.proj.weight" in sd or any(k.startswith("layers.") for k in sd)


def _swin_from(sd, where, arch, timm, in_channels, num_classes, rng, downsample="auto", head="auto"):
    if timm:
        spec, family = _arch_spec(arch, _TIMM_SWIN_ARCHS, "timm Swin"), "timm Swin"
        if downsample == "auto":  # a merging in stage 0 is only where older timm puts it
            downsample = "end" if any(k.startswith("layers.0.downsample.") for k in sd) else "start"
        if head == "auto":
            head = "head.fc" if any(k.startswith("head.fc.") for k in sd) else "head"
        names = _timm_swin_names(downsample, head)
    else:
        spec, family, names = _arch_spec(arch, _SWIN_ARCHS, "Swin"), "Swin", _TV_SWIN_NAMES
    ckpt_classes = _dim(sd, f"{names['head']}.weight", 0, 1000)
    ckpt_in = _dim(sd, f"{names['embed']}.weight", 1, 3)
    layout = _swin_layout(spec, names, ckpt_in, ckpt_classes)
    optional = {k for k, (_, targets) in layout.items() if timm and not targets}  # timm's buffers
    what = f"{names['what']} {arch if isinstance(arch, str) else family.split()[-1]}"
    arrays = _checked_arrays(sd, {k: shape for k, (shape, _) in layout.items()}, where, what, optional)
    ws = spec["window_size"]
    from .swin import relative_position_index
    want = relative_position_index(ws)
    bad = [k for k in arrays
           if k.endswith("relative_position_index") and not np.array_equal(arrays[k].reshape(-1), want)]
    if bad:
        raise PodletError(f"{where}: {bad} do not hold the relative position index of {ws}x{ws} windows "
                          f"({names['what']}'s relative_position_index buffer)")
    variables = _assemble(arrays, layout, f"{names['embed']}.weight", in_channels)
    if num_classes is not None and num_classes != ckpt_classes:
        _new_head(variables, num_classes, rng)
    return variables


def _vit_from(sd, where, arch, timm, in_channels, num_classes, rng, image_size, antialias=True):
    table, names, family = (_TIMM_VIT_ARCHS, _TIMM_VIT_NAMES, "timm ViT") if timm else \
        (_VIT_ARCHS, _TV_VIT_NAMES, "ViT")
    spec = _arch_spec(arch, table, family)
    ckpt_classes = _dim(sd, f"{names['head']}.weight", 0, 1000)
    ckpt_in = _dim(sd, f"{names['embed']}.weight", 1, 3)
    seq = _dim(sd, names["pos"], 1, (224 // spec["patch_size"]) ** 2 + 1)
    layout = _vit_layout(spec, names, ckpt_in, ckpt_classes, seq)
    what = f"{names['what']} {arch if isinstance(arch, str) else 'ViT'}"
    arrays = _checked_arrays(sd, {k: shape for k, (shape, _) in layout.items()}, where, what)
    if image_size is not None:
        grid = _image_grid(image_size, spec["patch_size"])
        try:  # torchvision's interpolate_embeddings, or timm's checkpoint filter
            arrays[names["pos"]] = resample_pos_embed(arrays[names["pos"]], grid, align_corners=not timm,
                                                      antialias=timm and antialias)
        except PodletError as e:
            raise PodletError(f"{where}: {names['pos']} {arrays[names['pos']].shape} for image_size "
                              f"{image_size!r}: {e}") from None
    variables = _assemble(arrays, layout, f"{names['embed']}.weight", in_channels)
    if num_classes is not None and num_classes != ckpt_classes:
        _new_head(variables, num_classes, rng)
    return variables


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
    return _swin_from(sd, where, arch, False, in_channels, num_classes, rng)


def load_timm_swin(path_or_state_dict, arch="swin_tiny_patch4_window7_224", in_channels: int = 1, num_classes=None,
                   rng=None, downsample: str = "auto", head: str = "auto"):
    """Variables ``{'params'}`` for ``podlet.models.SwinT`` / ``SwinS`` from a timm
    SwinTransformer state_dict (``swin_tiny_patch4_window7_224``, ``swin_small_...``;
    ``swin_base_...`` into ``SwinTransformer(embed_dim=128, depths=(2, 2, 18, 2),
    num_heads=(4, 8, 16, 32))``), of timm >= 0.9 or older.

    Args:
      path_or_state_dict, in_channels, num_classes, rng: as in ``load_torchvision_swin``.
      arch: a timm name above, or a mapping ``{embed_dim, depths, num_heads, window_size}``.
      downsample: where the patch mergings are: 'start' of stages 1..3 (timm >= 0.9),
        'end' of stages 0..2 (older timm), or 'auto' (read from the keys).
      head: 'head.fc' (timm >= 0.9), 'head' (older timm) or 'auto' (read from the keys).

    timm's buffers (``relative_position_index``, older timm's ``attn_mask``) may be present
    or not; an index must hold the usual values. podlet's Swin computes timm's logits when
    every stage's map is a multiple of the window and at least one window (224 px with 7x7
    windows: 56, 28, 14, 7); on other sizes timm shrinks the window or rolls before padding
    where podlet (as torchvision) pads first. Raises PodletError naming every missing,
    unexpected and mis-shaped key at once.
    """
    sd, where = _read_state_dict(path_or_state_dict)
    return _swin_from(sd, where, arch, True, in_channels, num_classes, rng, downsample, head)


def load_torchvision_vit(path_or_state_dict, arch="vit_b_16", in_channels: int = 1, num_classes=None, rng=None,
                         image_size=None):
    """Variables ``{'params'}`` for ``podlet.models.ViTB16`` / ``ViTB32`` from a torchvision
    ``vit_b_16`` / ``vit_b_32`` state_dict (a .pth path or a mapping of tensors/arrays).

    Args:
      path_or_state_dict: ``torch.save(model.state_dict(), path)`` output, or the dict.
      arch: 'vit_b_16', 'vit_b_32', or a mapping ``{patch_size, hidden_size, num_layers,
        num_heads, mlp_dim}`` for another layout of the same code.
      in_channels, num_classes, rng: as in ``load_torchvision_swin`` (grayscale by summing
        the RGB patch-embedding filters; a new truncated-normal head when the class count
        differs).
      image_size: the podlet model's input size (an int, (height, width) or (height,
        width, channels)); None keeps the checkpoint's patch grid (224 px for torchvision's
        weights). Otherwise the grid part of the position embeddings is resized to it as
        torchvision's ``interpolate_embeddings`` does (bicubic, align_corners=True).

    torchvision's ViT uses the exact GELU, as ``ViTB16``/``ViTB32`` do
    (``approximate_gelu=False``). Raises PodletError naming every missing, unexpected and
    mis-shaped key at once.
    """
    sd, where = _read_state_dict(path_or_state_dict)
    return _vit_from(sd, where, arch, False, in_channels, num_classes, rng, image_size)


def load_timm_vit(path_or_state_dict, arch="vit_tiny_patch16_224", in_channels: int = 1, num_classes=None, rng=None,
                  image_size=None, antialias: bool = True):
    """Variables ``{'params'}`` for ``podlet.models.VisionTransformer`` from a timm
    VisionTransformer state_dict: ``vit_tiny_patch16_224`` -> ``ViTTiny``,
    ``vit_small_patch16_224`` -> ``ViTSmall``, ``vit_base_patch16_224`` /
    ``vit_base_patch32_224`` -> ``ViTB16`` / ``ViTB32``. timm's ViTs use the exact GELU:
    build ViTTiny/ViTSmall with ``approximate_gelu=False`` for timm's logits (their
    default tanh form differs by about 1e-3).

    Args:
      path_or_state_dict, in_channels, num_classes, rng: as in ``load_torchvision_vit``.
      arch: a timm name above, or a mapping ``{patch_size, hidden_size, num_layers,
        num_heads, mlp_dim}``.
      image_size: as in ``load_torchvision_vit``, resizing as timm does when it loads a
        checkpoint into a model of another ``img_size`` (``resample_abs_pos_embed``:
        bicubic, align_corners=False, ``antialias``; False is timm's older
        ``resize_pos_embed``).

    Raises PodletError naming every missing, unexpected and mis-shaped key at once.
    """
    sd, where = _read_state_dict(path_or_state_dict)
    return _vit_from(sd, where, arch, True, in_channels, num_classes, rng, image_size, antialias)


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
# podlet model name (``MODELS``, the config's model.architecture), torchvision name or timm
# name -> (family, torchvision arch or None, timm arch or None)
_PRETRAINED = {**{n: ("resnet", n, None) for n in _ARCHS},
               **dict.fromkeys(("swin_tiny", "swin_t", "swin_tiny_patch4_window7_224"),
                               ("swin", "swin_t", "swin_tiny_patch4_window7_224")),
               **dict.fromkeys(("swin_small", "swin_s", "swin_small_patch4_window7_224"),
                               ("swin", "swin_s", "swin_small_patch4_window7_224")),
               **dict.fromkeys(("vit_tiny", "vit_tiny_patch16_224"), ("vit", None, "vit_tiny_patch16_224")),
               **dict.fromkeys(("vit_small", "vit_small_patch16_224"), ("vit", None, "vit_small_patch16_224")),
               **dict.fromkeys(("vit_b16", "vit_b_16", "vit_base_patch16_224"),
                               ("vit", "vit_b_16", "vit_base_patch16_224")),
               **dict.fromkeys(("vit_b32", "vit_b_32", "vit_base_patch32_224"),
                               ("vit", "vit_b_32", "vit_base_patch32_224"))}


def load_pretrained(path, model_name: str, *, in_channels: int = 1, num_classes=None, rng=None, target=None,
                    image_size=None):
    """Variables to initialise `model_name` from a pretrained file (the ``train.init_from``
    config key): a torchvision or timm .pth/.pt state_dict, or a Flax msgpack file
    (``.msgpack``/``.flax``: ``to_bytes`` of the variables, of the params alone, or of a
    TrainState). With `target` (``model.init``'s variables) a Flax file is checked path by
    path and shape by shape. Returns ``{'params', 'batch_stats'?}``.

    A .pth is read with the layout its keys show: torchvision's (resnet18/34/50,
    swin_tiny/small, vit_b16/b32) or timm's (swin_tiny/small from
    ``swin_*_patch4_window7_224`` of any timm version; vit_tiny, vit_small, vit_b16, vit_b32
    from ``vit_*_patch{16,32}_224``). torchvision's and timm's model names are accepted as
    `model_name` too. `image_size` (an int, (height, width) or the config's ``data.image_size``)
    resizes a ViT's position embeddings to that image's patch grid as the checkpoint's
    library would (``resample_pos_embed``); None keeps the checkpoint's grid. ResNets and
    Swins run at any size and ignore it."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext in (".pth", ".pt"):
        try:
            family, tv_arch, timm_arch = _PRETRAINED[str(model_name).lower()]
        except KeyError:
            raise PodletError(f"pretrained weights {path!r}: no torchvision layout for model {model_name!r} and no "
                              f"timm one; expected one of {sorted(_PRETRAINED)}") from None
        kw = dict(in_channels=in_channels, num_classes=num_classes, rng=rng)
        if family == "resnet":
            return load_torchvision_resnet(path, tv_arch, **kw)
        sd, where = _read_state_dict(path)
        timm = tv_arch is None or _is_timm(sd, family)
        arch = timm_arch if timm else tv_arch
        if family == "swin":
            return _swin_from(sd, where, arch, timm, **kw)
        return _vit_from(sd, where, arch, timm, image_size=image_size, **kw)
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
                      "or timm state_dict (.pth, .pt) or a Flax msgpack file (.msgpack, .flax)")
