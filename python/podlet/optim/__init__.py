"""podlet.optim: optax for podlet.

    import podlet.optim as optax

    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 7e-4, 500, 10000),
                                 weight_decay=2e-4))
    opt_state = tx.init(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)

Names, signatures, defaults and state pytrees are optax 0.2.8's. Files, one category
each: ``_base`` (GradientTransformation, chain, apply_updates), ``transform``
(scale_by_adam, clipping, weight decay, momentum, masking), ``alias`` (adam, adamw,
sgd), ``schedules``, ``losses`` (also reachable as ``podlet.optim.losses`` and
``podlet.optim.schedules``, like ``optax.losses`` and ``optax.schedules``).
"""
from ._base import (EmptyState, GradientTransformation, GradientTransformationExtraArgs, NO_PARAMS_MSG,
                    OptState, Params, Schedule, ScalarOrSchedule, Updates, apply_updates, chain,
                    global_norm, identity, incremental_update, init_empty_state, named_chain,
                    safe_increment, safe_int32_increment, set_to_zero, stateless,
                    stateless_with_tree_map, with_extra_args_support)
from .transform import (AddDecayedWeightsState, ClipByGlobalNormState, ClipState, EmaState, MaskedNode,
                        MaskedState, ScaleByAdamState, ScaleByScheduleState, ScaleState, TraceState,
                        WeightDecaySchedule, add_decayed_weights, clip, clip_by_global_norm, ema, masked,
                        scale, scale_by_adam, scale_by_learning_rate, scale_by_schedule, trace)
from .alias import adam, adamw, nadam, nadamw, sgd
from ._fused import fused_adamw  # podlet extra (not optax), so not in __all__
from . import schedules
from .schedules import (constant_schedule, cosine_decay_schedule, cosine_onecycle_schedule,
                        exponential_decay, join_schedules, linear_onecycle_schedule, linear_schedule,
                        piecewise_constant_schedule, piecewise_interpolate_schedule, polynomial_schedule,
                        sgdr_schedule, warmup_constant_schedule, warmup_cosine_decay_schedule,
                        warmup_exponential_decay_schedule)
from . import losses
from .losses import (classification_loss, huber_loss, l2_loss, sigmoid_binary_cross_entropy,
                     sigmoid_focal_loss, smooth_labels, softmax_cross_entropy,
                     softmax_cross_entropy_with_integer_labels, softmax_focal_loss, squared_error)

__all__ = [
    # base
    "EmptyState", "GradientTransformation", "GradientTransformationExtraArgs", "apply_updates", "chain",
    "global_norm", "identity", "incremental_update", "init_empty_state", "named_chain", "safe_increment",
    "safe_int32_increment", "set_to_zero", "stateless", "stateless_with_tree_map", "with_extra_args_support",
    # transforms
    "AddDecayedWeightsState", "ClipByGlobalNormState", "ClipState", "EmaState", "MaskedNode", "MaskedState",
    "ScaleByAdamState", "ScaleByScheduleState", "ScaleState", "TraceState", "WeightDecaySchedule",
    "add_decayed_weights", "clip", "clip_by_global_norm", "ema", "masked", "scale", "scale_by_adam",
    "scale_by_learning_rate", "scale_by_schedule", "trace",
    # optimizers
    "adam", "adamw", "nadam", "nadamw", "sgd",
    # schedules
    "schedules", "constant_schedule", "cosine_decay_schedule", "cosine_onecycle_schedule", "exponential_decay",
    "join_schedules", "linear_onecycle_schedule", "linear_schedule", "piecewise_constant_schedule",
    "piecewise_interpolate_schedule", "polynomial_schedule", "sgdr_schedule", "warmup_constant_schedule",
    "warmup_cosine_decay_schedule", "warmup_exponential_decay_schedule",
    # losses
    "losses", "classification_loss", "huber_loss", "l2_loss", "sigmoid_binary_cross_entropy",
    "sigmoid_focal_loss", "smooth_labels", "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels",
    "softmax_focal_loss", "squared_error",
]
