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
"""
import os

import numpy as np

from .. import numpy as jnp
from .. import random
from .. import tree_util
from .._src.errors import PodletError
from ..nn import initializers
from . import _flax_msgpack, _torch_pth

__all__ = ["load_torchvision_resnet", "load_flax_params", "load_pretrained", "torchvision_resnet_layout"]

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

    missing = [k for k in layout if k not in sd]
    unexpected = [k for k in sd if k not in layout]
    misshaped = []
    arrays = {}
    for k, (_, shape) in layout.items():
        if k in sd:
            arrays[k] = _as_numpy(k, sd[k])
            if arrays[k].shape != shape:
                misshaped.append(f"{k}: got {arrays[k].shape}, expected {shape}")
    if missing or unexpected or misshaped:
        parts = []
        if missing:
            parts.append(f"missing keys {missing}")
        if unexpected:
            parts.append(f"unexpected keys {unexpected}")
        if misshaped:
            parts.append(f"mis-shaped keys [{'; '.join(misshaped)}]")
        raise PodletError(f"{where} is not a torchvision {arch} state_dict: " + ", ".join(parts))

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


def load_pretrained(path, model_name: str, *, in_channels: int = 1, num_classes=None, rng=None, target=None):
    """Variables to initialise `model_name` from a pretrained file (the ``train.init_from``
    config key): a torchvision .pth/.pt state_dict (model_name resnet18/34/50) or a Flax
    msgpack file (``.msgpack``/``.flax``: ``to_bytes`` of the variables, of the params
    alone, or of a TrainState). With `target` (``model.init``'s variables) a Flax file
    is checked path by path and shape by shape. Returns ``{'params', 'batch_stats'?}``."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext in (".pth", ".pt"):
        return load_torchvision_resnet(path, model_name, in_channels=in_channels, num_classes=num_classes, rng=rng)
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
