"""The seed's training building blocks, from a config: model, LR schedule, optimizer,
TrainState, and the pmap'd train and eval steps.

    model = build_model(cfg)
    schedule = create_learning_rate_schedule(cfg.train, steps_per_epoch)
    state = create_train_state(cfg, model, schedule, key)
    p_train_step = podlet.pmap(make_train_step(cfg, schedule), axis_name="batch", donate_argnums=(0,))

Written exactly as the seed writes them for JAX/Flax/Optax (``import podlet as jax``).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

import podlet as jax
import podlet.numpy as jnp
import podlet.optim as optax
from podlet import models, struct
from podlet.training import layer_decay, train_state

__all__ = ["TrainState", "build_model", "model_definition", "create_learning_rate_schedule", "create_optimizer",
           "create_train_state", "make_train_step", "make_eval_step", "applied_learning_rate"]

AXIS = "batch"


class TrainState(train_state.TrainState):
    """The seed's TrainState: the whole run as one pytree."""
    batch_stats: Any = None
    ema_params: Any = None
    rng: Any = struct.field(pytree_node=True, default=None)


def _model_kwargs(cfg):
    m, t = cfg.model, cfg.train
    kw = {"num_classes": cfg.data.num_classes,
          "dropout_rate": t.dropout_rate_override if t.dropout_rate_override is not None else m.dropout_rate,
          "stochastic_depth_rate": m.stochastic_depth_rate, "in_channels": m.in_channels}
    if m.architecture == "small_cnn":
        kw.pop("stochastic_depth_rate")
        if m.widths is not None:
            kw["widths"] = list(m.widths)
    elif m.architecture.startswith("resnet"):
        for k in ("stage_sizes", "widths"):
            if getattr(m, k) is not None:
                kw[k] = list(getattr(m, k))
    else:
        for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
            if getattr(m, k) is not None:
                kw[k] = getattr(m, k)
    return kw


def build_model(cfg):
    """The flax-style Module the config describes (bf16 compute when use_bfloat16)."""
    dtype = jnp.bfloat16 if cfg.train.use_bfloat16 else jnp.float32
    if cfg.model.architecture == "small_cnn":
        from podlet.training.small_cnn import SmallCNN
        return SmallCNN(dtype=dtype, **_model_kwargs(cfg))
    return models.get_model(cfg.model.architecture, dtype=dtype, **_model_kwargs(cfg))


def model_definition(cfg) -> dict:
    """What a checkpoint pins about its model: enough to rebuild it without the config."""
    return {"architecture": cfg.model.architecture, "kwargs": _model_kwargs(cfg),
            "dtype": "bfloat16" if cfg.train.use_bfloat16 else "float32",
            "input_shape": [1] + list(cfg.data.image_size), "class_names": cfg.class_names}


def create_learning_rate_schedule(config, steps_per_epoch: int):
    """Linear warmup to ``learning_rate`` over ``warmup_epochs``, then cosine decay to 0.

    The seed passed ``decay_steps=total - warmup``; optax's ``decay_steps`` already counts
    the warmup, so that schedule reached 0 ``warmup`` steps early and stayed there. Here the
    cosine ends exactly at the last step.
    """
    warmup_steps = int(round(config.warmup_epochs * steps_per_epoch))
    total_steps = config.epochs * steps_per_epoch
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.learning_rate,
        warmup_steps=warmup_steps,
        decay_steps=max(total_steps, warmup_steps + 1),
        end_value=0.0,
    )


def _partitioned(config):
    """Whether the config asks for parameter groups (layer-wise decay, a frozen backbone)."""
    return config.layer_decay is not None or config.freeze_backbone_epochs > 0


def create_optimizer(config, learning_rate_schedule, *, groups=None, steps_per_epoch=None):
    """The seed's chain: clip by global norm first (before the update, where it helps),
    then the optimizer.

    With ``train.layer_decay`` or ``train.freeze_backbone_epochs`` it is the run's
    optimizer per parameter group instead (``layer_decay.partitioned_optimizer``: the
    clip, then optax's ``multi_transform``), which needs the groups
    (``layer_decay.param_groups(model, params, ...)``) and, to train with a frozen
    backbone, the steps per epoch (None builds an optimizer that can hold a restored
    state but raises on update).
    """
    if _partitioned(config):
        if groups is None:
            raise ValueError("create_optimizer: train.layer_decay / train.freeze_backbone_epochs need the parameter "
                             "groups: pass groups=layer_decay.param_groups(model, params, ...)")
        freeze = config.freeze_backbone_epochs
        freeze_steps = (freeze * steps_per_epoch if steps_per_epoch is not None else None) if freeze else 0
        return layer_decay.partitioned_optimizer(config, learning_rate_schedule, groups, freeze_steps=freeze_steps)
    transforms = []
    if config.grad_clip_norm is not None:
        transforms.append(optax.clip_by_global_norm(config.grad_clip_norm))
    transforms.append(layer_decay.run_optimizer(config, learning_rate_schedule))
    return optax.chain(*transforms)


def create_train_state(cfg, model, schedule, key, *, steps_per_epoch=None):
    """Initialises params/batch_stats from `key`; EMA params start as a copy of params.

    `steps_per_epoch` (the schedule's) tells a frozen backbone
    (``train.freeze_backbone_epochs``) when to train; without it such a state can
    receive a checkpoint but not train (the optimizer state has the same structure
    either way)."""
    init_rng, state_rng = jax.random.split(key)
    h, w, c = cfg.data.image_size
    variables = model.init(init_rng, jnp.zeros((1, h, w, c), jnp.float32), train=False)
    params = variables["params"]
    groups = (layer_decay.param_groups(model, params, layer_decay=cfg.train.layer_decay)
              if _partitioned(cfg.train) else None)
    tx = create_optimizer(cfg.train, schedule, groups=groups, steps_per_epoch=steps_per_epoch)
    return TrainState.create(
        apply_fn=model.apply, params=params, tx=tx,
        batch_stats=variables.get("batch_stats", {}),
        ema_params=params if cfg.train.ema_decay is not None else None,
        rng=state_rng)


def _schedule_count(opt_state):
    """The step count the optimizer's schedule will be evaluated at (its ScaleByScheduleState)."""
    if isinstance(opt_state, optax.ScaleByScheduleState):
        return opt_state.count
    if isinstance(opt_state, tuple):
        for s in opt_state:
            c = _schedule_count(s)
            if c is not None:
                return c
    return None


def applied_learning_rate(state, schedule):
    """The LR the next update applies (the schedule at the optimizer's own count, which
    does not advance on skipped steps); with parameter groups, the head's (the run's
    schedule unscaled)."""
    count = layer_decay.head_schedule_count(state.opt_state)
    if count is None:
        count = _schedule_count(state.opt_state)
    return schedule(state.step if count is None else count)


def make_train_step(cfg, schedule):
    """The seed's train step for one device's shard (to be pmap'd over axis 'batch').

    Beyond the seed: it returns the grad norm and the LR it applied, and a step whose
    loss or gradients are not finite leaves params, optimizer state, batch stats and EMA
    unchanged (``finite`` = 0 in the metrics; the loop stops or skips by ``nan_policy``).
    """
    t = cfg.train
    num_classes = cfg.data.num_classes
    class_weights = None if t.class_weights is None else tuple(t.class_weights)

    def classification_loss(logits, labels):
        return optax.classification_loss(logits, labels, num_classes, loss_name=t.loss_name,
                                         label_smoothing=t.label_smoothing, class_weights=class_weights,
                                         gamma=t.focal_gamma)

    def train_step(state, batch):
        dropout_rng, next_rng = jax.random.split(state.rng)
        dropout_rng = jax.random.fold_in(dropout_rng, jax.lax.axis_index(AXIS))

        def loss_fn(params):
            variables = {"params": params, "batch_stats": state.batch_stats}
            logits, updates = state.apply_fn(
                variables, batch["image"], train=True,
                rngs={"dropout": dropout_rng},
                mutable=["batch_stats"],
            )
            loss = classification_loss(logits, batch["label"])
            return loss, (logits, updates.get("batch_stats", state.batch_stats))

        (loss, (logits, new_bs)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        grads = jax.lax.pmean(grads, axis_name=AXIS)
        loss = jax.lax.pmean(loss, axis_name=AXIS)
        lr = applied_learning_rate(state, schedule)
        new_state = state.apply_gradients(grads=grads).replace(
            batch_stats=jax.lax.pmean(new_bs, axis_name=AXIS),
            rng=next_rng,
        )
        if t.ema_decay is not None:
            ema = jax.tree_util.tree_map(
                lambda o, n: t.ema_decay * o + (1.0 - t.ema_decay) * n,
                state.ema_params, new_state.params,
            )
            new_state = new_state.replace(ema_params=ema)
        grad_norm = optax.global_norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        # Keep the last good state on a bad step; step and rng still advance so the data
        # position and the dropout stream stay those of an uninterrupted run.
        keep = lambda n, o: jnp.where(finite, n, o)  # noqa: E731
        new_state = new_state.replace(
            params=jax.tree_util.tree_map(keep, new_state.params, state.params),
            opt_state=jax.tree_util.tree_map(keep, new_state.opt_state, state.opt_state),
            batch_stats=jax.tree_util.tree_map(keep, new_state.batch_stats, state.batch_stats),
            ema_params=jax.tree_util.tree_map(keep, new_state.ema_params, state.ema_params),
        )
        accuracy = jnp.mean((jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32))
        metrics = {"loss": loss, "grad_norm": grad_norm, "lr": lr, "finite": finite.astype(jnp.int32),
                   "accuracy": jax.lax.pmean(accuracy, axis_name=AXIS)}
        return new_state, metrics

    return train_step


def make_eval_step():
    """Logits of one device's shard, in eval mode (running BatchNorm statistics)."""

    def eval_step(state, params, images):
        variables = {"params": params, "batch_stats": state.batch_stats}
        return state.apply_fn(variables, images, train=False).astype(jnp.float32)

    return eval_step


def host_loss(logits, labels, cfg) -> float:
    """The training loss of many examples, on the host in float64 (validation loss: the
    device loss is a batch mean and cannot leave out the padding of the last batch)."""
    t = cfg.train
    k = cfg.data.num_classes
    z = np.asarray(logits, np.float64)
    labels = np.asarray(labels)
    logp = z - z.max(axis=1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
    one_hot = np.eye(k)[labels]
    if t.label_smoothing:
        one_hot = one_hot * (1.0 - t.label_smoothing) + t.label_smoothing / k
    ce = -(one_hot * logp).sum(axis=1)
    if t.loss_name == "focal":
        pt = (np.exp(logp) * one_hot).sum(axis=1)
        ce = (1.0 - pt) ** t.focal_gamma * ce
    if t.class_weights is not None:
        ce = ce * np.asarray(t.class_weights)[labels]
    return float(ce.mean()) if ce.size else math.nan
