"""podlet.models: the classifiers of the mammography study, written with podlet.nn.

    from podlet import models
    model = models.ResNet34(num_classes=5, dropout_rate=0.1, stochastic_depth_rate=0.05)
    models.summary(model, jnp.zeros((1, 224, 224, 1)), train=False)    # prints the table
    models.param_count(model, podlet.ShapeDtypeStruct((1, 224, 224, 1), jnp.float32), train=False)

Every model takes NHWC images and ``train`` as a keyword (``__call__(x, *, train)``),
returns float32 logits, keeps float32 params and computes in ``dtype``.
"""
import numpy as _np

from .. import numpy as _jnp
from .. import random as _random
from .. import tree_util as _tu
from .._src.core import eval_shape as _eval_shape
from .mlp import MLP
from .resnet import ResNetBlock, BottleneckResNetBlock, ResNet, ResNet18, ResNet34, ResNet50
from .vit import VisionTransformer, ViTTiny, ViTSmall, ViTB16, ViTB32
from .swin import SwinTransformer, SwinT, SwinS
from .import_weights import (load_torchvision_resnet, load_torchvision_swin, load_torchvision_vit, load_timm_swin,
                             load_timm_vit, load_flax_params, load_pretrained, resample_pos_embed,
                             torchvision_resnet_layout)

__all__ = ["MLP", "ResNetBlock", "BottleneckResNetBlock", "ResNet", "ResNet18", "ResNet34", "ResNet50",
           "VisionTransformer", "ViTTiny", "ViTSmall", "ViTB16", "ViTB32", "SwinTransformer", "SwinT", "SwinS",
           "MODELS", "get_model", "summary", "param_count", "count_params", "load_torchvision_resnet",
           "load_torchvision_swin", "load_torchvision_vit", "load_timm_swin", "load_timm_vit", "load_flax_params",
           "load_pretrained", "resample_pos_embed",
           "torchvision_resnet_layout"]

# Config names (``model: resnet34``) -> constructors.
MODELS = {
    "mlp": MLP,
    "resnet18": ResNet18,
    "resnet34": ResNet34,
    "resnet50": ResNet50,
    "vit_tiny": ViTTiny,
    "vit_small": ViTSmall,
    "vit_b16": ViTB16,
    "vit_b32": ViTB32,
    "swin_tiny": SwinT,
    "swin_small": SwinS,
}


def get_model(name: str, **kwargs):
    """The model registered as `name` (see MODELS), built with `kwargs`."""
    try:
        ctor = MODELS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}") from None
    return ctor(**kwargs)


def count_params(tree) -> int:
    """Total number of elements in a pytree of arrays (or ShapeDtypeStructs)."""
    return int(sum(int(_np.prod(x.shape, dtype=_np.int64)) for x in _tu.tree_leaves(tree) if hasattr(x, "shape")))


def param_count(model, *inputs, collection: str = "params", **kwargs) -> int:
    """Number of parameters `model.init` would create for `inputs`, found by tracing
    (``eval_shape``): no initializer runs, so a ResNet-50 costs milliseconds.
    `inputs` may be arrays or ``podlet.ShapeDtypeStruct``; `kwargs` go to the model
    (e.g. ``train=False``)."""
    shapes = _eval_shape(lambda key, *xs: model.init(key, *xs, **kwargs), _random.PRNGKey(0), *inputs)
    return count_params(shapes.get(collection, {}))


def summary(model, *inputs, depth=None, rngs=None, print_fn=print, **kwargs) -> str:
    """Prints (with `print_fn`; None to skip) and returns ``model.tabulate``'s table: every
    submodule's path, input/output shapes, its params and the totals. `inputs` may be
    arrays or ``ShapeDtypeStruct``; `depth` limits the nesting shown."""
    inputs = [_jnp.zeros(x.shape, x.dtype) if not hasattr(x, "__array__") and hasattr(x, "shape") else x
              for x in inputs]
    table = model.tabulate(_random.PRNGKey(0) if rngs is None else rngs, *inputs, depth=depth, **kwargs)
    if print_fn is not None:
        print_fn(table)
    return table
