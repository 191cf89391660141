"""Fine-tuning's parameter groups: layer-wise learning-rate decay and a frozen backbone
(``train.layer_decay``, ``train.freeze_backbone_epochs``).

Layer-wise decay as BEiT (Bao et al. 2021) and the Swin/SimMIM fine-tuning code do it:
every parameter gets a layer id,

    ViT:    embedding, cls, position embeddings -> 0; Transformer/encoderblock_i -> i + 1;
            Transformer/encoder_norm and head -> L + 1          (L = num_layers)
    Swin:   patch_embed, patch_norm -> 0; stage_s_block_j -> its index among all blocks,
            counted through the stages, + 1; merge_s (the patch merging after stage s)
            -> the id of stage s's last block (it ends that stage, as SimMIM's
            get_swin_layer puts `layers.s.downsample`); norm and head -> L + 1
            (L = sum(depths), 12 for Swin-T)
    ResNet: per stage: conv_init, bn_init -> 0; the blocks of stage s -> s + 1;
            the classifier -> L + 1 (L = len(stage_sizes))

and its learning rate is the run's times ``decay ** (L + 1 - id)``: the head and final
norm train at the full rate, the patch embedding at ``decay ** (L + 1)``. ``small_cnn``
has no layers to decay (the config refuses the key for it).

The optimizer (:func:`partitioned_optimizer`) is optax's ``multi_transform`` over a
label tree, each label's transformation the run's optimizer (adamw / adam / sgd) with
its schedule scaled, after one global ``clip_by_global_norm``:

    chain([masked(conditionally_mask(identity()), backbone)],   # frozen: zero grads
          clip_by_global_norm(c),
          multi_transform({"layer_00": [conditionally_mask](adamw(s_0 * schedule)), ...,
                           "head": adamw(schedule)}, labels))

A frozen backbone (the first ``freeze_backbone_epochs`` epochs) wraps each backbone
label's optimizer in optax's ``conditionally_mask``: while its step counter is below the
frozen steps, the updates are zeros and its state (Adam's count and moments) is left as
initialised, so frozen params stay bit-identical, get no weight decay, and start Adam
afresh when released (as PyTorch's per-parameter state does after ``requires_grad``
turns on); their schedule is shifted by the frozen steps so that it follows the run's
step. A first gate zeroes the backbone's gradients before the clip, which therefore
measures the head's gradients alone while it trains alone. Everything lives in the
optimizer state, so the switch needs no retrace and survives a checkpoint.
"""
from __future__ import annotations

import re
from typing import Any, NamedTuple

import podlet.optim as optax
from podlet import models
from podlet import tree_util

__all__ = ["ParamGroups", "layer_ids", "head_keys", "param_groups", "partitioned_optimizer", "run_optimizer",
           "head_schedule_count", "HEAD", "BACKBONE"]

HEAD = "head"          # the label of the classifier's params
BACKBONE = "backbone"  # the label of every other param when there is no layer decay


class ParamGroups(NamedTuple):
    """A label per param (a tree of strings with the params' structure) and each label's
    learning-rate scale; ``frozen`` are the labels a frozen backbone holds still."""
    labels: Any
    scales: dict
    frozen: tuple


def _kind(model):
    if isinstance(model, models.VisionTransformer):
        return "vit"
    if isinstance(model, models.SwinTransformer):
        return "swin"
    if isinstance(model, models.ResNet):
        return "resnet"
    return None


def head_keys(model, params):
    """The top-level params of the classifier: ``head`` for ViT and Swin, the one
    top-level Dense (``Dense_0``) of a ResNet or small_cnn."""
    if _kind(model) in ("vit", "swin"):
        keys = [k for k in params if k == "head"]
    else:
        keys = [k for k in params if re.fullmatch(r"Dense_\d+", k)]
    if len(keys) != 1:
        raise ValueError(f"{type(model).__name__}: expected one classifier among the top-level params "
                         f"{sorted(params)}, found {keys}")
    return tuple(keys)


def _unknown(model, where, key):
    return ValueError(f"layer_ids: {type(model).__name__} has a param {where}{key!r} that no layer id rule "
                      f"covers (the rules follow podlet.models' names)")


def layer_ids(model, params):
    """``(ids, L)``: a tree of int layer ids with the params' structure, and the number
    of layers ``L`` (ids run from 0 to L + 1; see the module docstring)."""
    kind = _kind(model)
    ids = {}
    if kind == "vit":
        blocks = {k for k in params.get("Transformer", {}) if re.fullmatch(r"encoderblock_\d+", k)}
        n = len(blocks)
        for k, v in params.items():
            if k in ("embedding", "cls"):
                i = 0
            elif k == "head":
                i = n + 1
            elif k == "Transformer":
                sub = {}
                for k2, v2 in v.items():
                    if k2 == "posembed_input":
                        j = 0
                    elif k2 in blocks:
                        j = int(k2.rsplit("_", 1)[1]) + 1
                    elif k2 == "encoder_norm":
                        j = n + 1
                    else:
                        raise _unknown(model, "Transformer/", k2)
                    sub[k2] = tree_util.tree_map(lambda _, j=j: j, v2)
                ids[k] = sub
                continue
            else:
                raise _unknown(model, "", k)
            ids[k] = tree_util.tree_map(lambda _, i=i: i, v)
        return ids, n
    if kind == "swin":
        blocks = sorted((tuple(map(int, m.groups())), k) for k in params
                        if (m := re.fullmatch(r"stage_(\d+)_block_(\d+)", k)))
        block_id = {k: i + 1 for i, (_, k) in enumerate(blocks)}
        last_of_stage = {}
        for (s, _), k in blocks:
            last_of_stage[s] = block_id[k]
        n = len(blocks)
        for k, v in params.items():
            if k in ("patch_embed", "patch_norm"):
                i = 0
            elif k in block_id:
                i = block_id[k]
            elif (m := re.fullmatch(r"merge_(\d+)", k)) and int(m.group(1)) in last_of_stage:
                i = last_of_stage[int(m.group(1))]
            elif k in ("norm", "head"):
                i = n + 1
            else:
                raise _unknown(model, "", k)
            ids[k] = tree_util.tree_map(lambda _, i=i: i, v)
        return ids, n
    if kind == "resnet":
        stage_of = [s for s, size in enumerate(model.stage_sizes) for _ in range(size)]
        n = len(model.stage_sizes)
        (head,) = head_keys(model, params)
        for k, v in params.items():
            m = re.fullmatch(r"\w*Block_(\d+)", k)
            if k in ("conv_init", "bn_init"):
                i = 0
            elif m and int(m.group(1)) < len(stage_of):
                i = stage_of[int(m.group(1))] + 1
            elif k == head:
                i = n + 1
            else:
                raise _unknown(model, "", k)
            ids[k] = tree_util.tree_map(lambda _, i=i: i, v)
        return ids, n
    raise ValueError(f"train.layer_decay: {type(model).__name__} has no layer ids (layer-wise decay is defined "
                     f"for ViT, Swin and ResNets, per stage)")


def param_groups(model, params, *, layer_decay=None):
    """The labels of :func:`partitioned_optimizer` for `model`'s `params`.

    With `layer_decay`, a backbone param is labelled ``layer_<id>`` (its scale
    ``layer_decay ** (L + 1 - id)``), the classifier ``head`` (scale 1, its layer being
    L + 1); without, the backbone is one label ``backbone`` (scale 1). Every label but
    ``head`` is backbone (what ``train.freeze_backbone_epochs`` holds still)."""
    heads = head_keys(model, params)
    if layer_decay is None:
        labels = {k: tree_util.tree_map(lambda _, k=k: HEAD if k in heads else BACKBONE, v)
                  for k, v in params.items()}
        return ParamGroups(labels, {BACKBONE: 1.0, HEAD: 1.0}, (BACKBONE,))
    if not 0.0 < layer_decay <= 1.0:
        raise ValueError(f"layer_decay: expected a value in (0, 1], got {layer_decay!r}")
    ids, n = layer_ids(model, params)
    width = len(str(n + 1))
    name = lambda i: f"layer_{i:0{width}d}"  # noqa: E731  (zero-padded: labels sort by depth)
    labels = {k: tree_util.tree_map(lambda i, k=k: HEAD if k in heads else name(i), v) for k, v in ids.items()}
    used = sorted(set(tree_util.tree_leaves(labels)) - {HEAD})
    scales = {name(i): float(layer_decay ** (n + 1 - i)) for i in range(n + 2) if name(i) in used}
    scales[HEAD] = 1.0
    return ParamGroups(labels, scales, tuple(used))


def run_optimizer(config, learning_rate):
    """The run's optimizer (``train.optimizer``) at `learning_rate` (a schedule or a
    number), without the clip: adamw with ``train.weight_decay``, adam, or SGD with
    momentum 0.9."""
    if config.optimizer == "adamw":
        return optax.adamw(learning_rate=learning_rate, weight_decay=config.weight_decay)
    if config.optimizer == "adam":
        return optax.adam(learning_rate=learning_rate)
    return optax.sgd(learning_rate=learning_rate, momentum=0.9)


def _scaled(schedule, scale, shift=0):
    """``count -> scale * schedule(count + shift)`` (the schedule itself when it is unchanged)."""
    if scale == 1.0 and not shift:
        return schedule
    if scale == 1.0:
        return lambda count: schedule(count + shift)
    return lambda count: scale * schedule(count + shift)


def partitioned_optimizer(config, schedule, groups: ParamGroups, *, freeze_steps=0):
    """``[gate ->] clip_by_global_norm -> multi_transform({label: run optimizer with its
    scaled schedule})``: the run's optimizer per parameter group.

    Args:
      config: the TrainConfig (optimizer, weight_decay, grad_clip_norm).
      schedule: the run's learning-rate schedule ``count -> lr``.
      groups: from :func:`param_groups`.
      freeze_steps: optimizer steps during which ``groups.frozen`` get zero updates (and
        zero gradients before the clip); None for a state that only receives a
        checkpoint (its structure is that of any count; an update raises).

    Returns:
      An optax-style GradientTransformation; its state is ``(..., PartitionState)``.
    """
    def released(step):
        if freeze_steps is None:
            raise ValueError("this optimizer was built without the run's steps per epoch (freeze_steps=None): "
                             "it can hold a restored state but not train with train.freeze_backbone_epochs")
        return step >= freeze_steps

    freezing = freeze_steps is None or freeze_steps > 0
    transforms = {}
    for label, scale in groups.scales.items():
        if freezing and label in groups.frozen:
            transforms[label] = optax.conditionally_mask(
                run_optimizer(config, _scaled(schedule, scale, freeze_steps or 0)), released)
        else:
            transforms[label] = run_optimizer(config, _scaled(schedule, scale))
    chain = []
    if freezing:
        frozen_mask = tree_util.tree_map(lambda label: label in groups.frozen, groups.labels)
        chain.append(optax.masked(optax.conditionally_mask(optax.identity(), released), frozen_mask))
    if config.grad_clip_norm is not None:
        chain.append(optax.clip_by_global_norm(config.grad_clip_norm))
    chain.append(optax.multi_transform(transforms, groups.labels))
    return optax.chain(*chain)


def head_schedule_count(opt_state):
    """The count the head's schedule is evaluated at (its group's ScaleByScheduleState),
    or None when `opt_state` is not a partitioned optimizer's."""
    for s in opt_state if isinstance(opt_state, tuple) else ():
        if isinstance(s, optax.PartitionState) and HEAD in s.inner_states:
            for leaf in _states(s.inner_states[HEAD]):
                if isinstance(leaf, optax.ScaleByScheduleState):
                    return leaf.count
    return None


def _states(state):
    yield state
    if isinstance(state, tuple):
        for s in state:
            yield from _states(s)

