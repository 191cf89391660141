"""podlet.optim: optax for podlet.

    import podlet.optim as optax

    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 7e-4, 500, 10000),
                                 weight_decay=2e-4))
    opt_state = tx.init(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)

Names, signatures, defaults and state pytrees are optax 0.2.8's. Files, one category
each: ``_base`` (GradientTransformation, chain, apply_updates), ``transform`` (Adam,
clipping by global norm, weight decay, momentum, masking), ``_moments`` (the other
moment-based scalings: rms, amsgrad, adamax, belief, yogi, radam, adadelta, adan,
lion, novograd, sm3, adafactor's factored rms), ``_scaling`` (sign, trust ratio,
param-block norms, centralize, Polyak, Rprop, optimistic, DoG), ``_clipping`` (block
RMS, adaptive, per example), ``_constrain`` (non-negative params, zero NaNs, gradient
noise), ``_combine`` (partition / multi_transform, freeze), ``_linalg`` (power iteration,
inverse p-th roots, nnls, multi_normal), ``_linesearch`` (L-BFGS, zoom and
backtracking line searches), ``_wrappers`` (MultiSteps,
apply_if_finite, conditional, flatten, lookahead, monitoring), ``_inject``
(inject_hyperparams), ``alias`` (the optimizers), ``schedules``, ``losses`` (with
``_losses_classification`` and ``_losses_structured``); and the
submodules ``tree`` (optax.tree), ``contrib`` (schedule-free, reduce_on_plateau),
``microbatching``, ``projections``, ``perturbations``, ``second_order`` and the
optax-named re-export modules ``transforms`` and ``tree_utils``, reachable as
``podlet.optim.<name>`` like optax's.
"""
from ._base import (EmptyState, GradientTransformation, GradientTransformationExtraArgs, NO_PARAMS_MSG,
                    OptState, Params, Schedule, ScalarOrSchedule, StatefulSchedule, TransformInitFn,
                    TransformUpdateExtraArgsFn, TransformUpdateFn, Updates, apply_updates, chain, global_norm,
                    identity, incremental_update, init_empty_state, named_chain, periodic_update, safe_increment,
                    safe_int32_increment, scale_gradient, set_to_zero, stateless, stateless_with_tree_map,
                    with_extra_args_support)
from .transform import (AddDecayedWeightsState, ClipByGlobalNormState, ClipState, EmaState, MaskedNode,
                        MaskedState, ScaleByAdamState, ScaleByScheduleState, ScaleState, TraceState,
                        WeightDecaySchedule, add_decayed_weights, bias_correction, clip, clip_by_global_norm, ema,
                        masked, scale, scale_by_adam, scale_by_learning_rate, scale_by_schedule, trace,
                        update_moment, update_moment_per_elem_norm)
from ._moments import (FactoredState, ScaleByAdaDeltaState, ScaleByAdanState, ScaleByAmsgradState,
                       ScaleByBeliefState, ScaleByLionState, ScaleByNovogradState, ScaleByRStdDevState,
                       ScaleByRmsState, ScaleByRssState, ScaleBySM3State, scale_by_adadelta, scale_by_adamax,
                       scale_by_adan, scale_by_amsgrad, scale_by_belief, scale_by_factored_rms, scale_by_lion,
                       scale_by_novograd, scale_by_radam, scale_by_rms, scale_by_rss, scale_by_sm3,
                       scale_by_stddev, scale_by_yogi)
from ._scaling import (ScaleByRpropState, ScaleByTrustRatioState, centralize, normalize_by_update_norm,
                       safe_norm, safe_root_mean_squares, scale_by_distance_over_gradients,
                       scale_by_optimistic_gradient, scale_by_param_block_norm, scale_by_param_block_rms,
                       scale_by_polyak, scale_by_rprop, scale_by_sign, scale_by_trust_ratio)
from ._clipping import (AdaptiveGradClipState, adaptive_grad_clip, clip_by_block_rms, per_example_global_norm_clip,
                        per_example_layer_norm_clip)
from ._constrain import (AddNoiseState, NonNegativeParamsState, ZeroNansState, add_noise, keep_params_nonnegative,
                         zero_nans)
from ._combine import (MultiTransformState, PartitionState, freeze, multi_transform, partition,
                       selective_transform)
from ._wrappers import (ApplyEvery, ApplyIfFiniteState, ConditionallyMaskState, ConditionallyTransformState,
                        LookaheadParams, LookaheadState, MonitorState, MultiSteps, MultiStepsState,
                        ShouldSkipUpdateFunction, SnapshotState, apply_every, apply_if_finite, conditionally_mask,
                        conditionally_transform, flatten, lookahead, measure_with_ema, monitor, skip_large_updates,
                        skip_not_finite, snapshot)
from .alias import (MaskOrFn, adabelief, adadelta, adafactor, adagrad, adam, adamax, adamaxw, adamw, adan, amsgrad,
                    fromage, lamb, lars, lbfgs, lion, nadam, nadamw, noisy_sgd, novograd, optimistic_adam,
                    optimistic_adam_v2, optimistic_gradient_descent, polyak_sgd, radam, rmsprop, rprop, sgd,
                    sign_sgd, signum, sm3, yogi)
from ._fused import fused_adamw, fused_lion, fused_sgd  # podlet extras (not optax), so not in __all__
from . import schedules
from .schedules import (InjectHyperparamsState, InjectStatefulHyperparamsState, WrappedSchedule,
                        constant_schedule, cosine_decay_schedule, cosine_onecycle_schedule, exponential_decay,
                        inject_hyperparams, inject_stateful_hyperparams, join_schedules, linear_onecycle_schedule,
                        linear_schedule, piecewise_constant_schedule, piecewise_interpolate_schedule,
                        polynomial_schedule, sgdr_schedule, warmup_constant_schedule, warmup_cosine_decay_schedule,
                        warmup_exponential_decay_schedule)
from . import losses
from .losses import (classification_loss, convex_kl_divergence, cosine_distance, cosine_similarity, ctc_loss,
                     ctc_loss_with_forward_probs, generalized_kl_divergence, hinge_loss, huber_loss, kl_divergence,
                     l2_loss, log_cosh, ntxent, safe_softmax_cross_entropy, sigmoid_binary_cross_entropy,
                     sigmoid_focal_loss, smooth_labels, softmax_cross_entropy,
                     softmax_cross_entropy_with_integer_labels, softmax_focal_loss, squared_error)
from . import tree
from . import contrib
from . import microbatching
from .microbatching import microbatch
from . import perturbations, projections, second_order, transforms, tree_utils
from ._linalg import matrix_inverse_pth_root, multi_normal, nnls, power_iteration
from ._linesearch import (ScaleByBacktrackingLinesearchState, ScaleByLBFGSState, ScaleByZoomLinesearchState,
                          ZoomLinesearchInfo, scale_by_backtracking_linesearch, scale_by_lbfgs,
                          scale_by_zoom_linesearch, value_and_grad_from_state)

tree_map_params = tree.map_params
update_infinity_moment = tree.update_infinity_moment

__all__ = [
    # base
    "EmptyState", "GradientTransformation", "GradientTransformationExtraArgs", "apply_updates", "chain",
    "global_norm", "identity", "incremental_update", "init_empty_state", "named_chain", "periodic_update",
    "safe_increment", "safe_int32_increment", "scale_gradient", "set_to_zero", "stateless",
    "stateless_with_tree_map", "with_extra_args_support", "OptState", "Params", "Updates", "Schedule",
    "ScalarOrSchedule", "TransformInitFn", "TransformUpdateFn", "TransformUpdateExtraArgsFn", "MaskOrFn",
    "tree_map_params", "bias_correction", "update_moment", "update_moment_per_elem_norm", "update_infinity_moment",
    "safe_norm", "safe_root_mean_squares",
    # transforms
    "AddDecayedWeightsState", "ClipByGlobalNormState", "ClipState", "EmaState", "MaskedNode", "MaskedState",
    "ScaleByAdamState", "ScaleByScheduleState", "ScaleState", "TraceState", "WeightDecaySchedule",
    "add_decayed_weights", "clip", "clip_by_global_norm", "ema", "masked", "scale", "scale_by_adam",
    "scale_by_learning_rate", "scale_by_schedule", "trace",
    "FactoredState", "ScaleByAdaDeltaState", "ScaleByAdanState", "ScaleByAmsgradState", "ScaleByBeliefState",
    "ScaleByLionState", "ScaleByNovogradState", "ScaleByRStdDevState", "ScaleByRmsState", "ScaleByRssState",
    "ScaleBySM3State", "scale_by_adadelta", "scale_by_adamax", "scale_by_adan", "scale_by_amsgrad",
    "scale_by_belief", "scale_by_factored_rms", "scale_by_lion", "scale_by_novograd", "scale_by_radam",
    "scale_by_rms", "scale_by_rss", "scale_by_sm3", "scale_by_stddev", "scale_by_yogi",
    "ScaleByRpropState", "ScaleByTrustRatioState", "centralize", "normalize_by_update_norm",
    "scale_by_distance_over_gradients", "scale_by_optimistic_gradient", "scale_by_param_block_norm",
    "scale_by_param_block_rms", "scale_by_polyak", "scale_by_rprop", "scale_by_sign", "scale_by_trust_ratio",
    "AdaptiveGradClipState", "adaptive_grad_clip", "clip_by_block_rms", "per_example_global_norm_clip",
    "per_example_layer_norm_clip", "AddNoiseState", "NonNegativeParamsState", "ZeroNansState", "add_noise",
    "keep_params_nonnegative", "zero_nans",
    # combining and wrappers
    "MultiTransformState", "PartitionState", "freeze", "multi_transform", "partition", "selective_transform",
    "ApplyEvery", "ApplyIfFiniteState", "ConditionallyMaskState", "ConditionallyTransformState", "LookaheadParams",
    "LookaheadState", "MonitorState", "MultiSteps", "MultiStepsState", "ShouldSkipUpdateFunction",
    "SnapshotState", "apply_every", "apply_if_finite", "conditionally_mask", "conditionally_transform", "flatten",
    "lookahead", "measure_with_ema", "monitor", "skip_large_updates", "skip_not_finite", "snapshot",
    # optimizers
    "adabelief", "adadelta", "adafactor", "adagrad", "adam", "adamax", "adamaxw", "adamw", "adan", "amsgrad",
    "fromage", "lamb", "lars", "lion", "nadam", "nadamw", "noisy_sgd", "novograd", "optimistic_adam",
    "optimistic_adam_v2", "optimistic_gradient_descent", "polyak_sgd", "radam", "rmsprop", "rprop", "sgd",
    "sign_sgd", "signum", "sm3", "yogi",
    # schedules
    "schedules", "constant_schedule", "cosine_decay_schedule", "cosine_onecycle_schedule", "exponential_decay",
    "join_schedules", "linear_onecycle_schedule", "linear_schedule", "piecewise_constant_schedule",
    "piecewise_interpolate_schedule", "polynomial_schedule", "sgdr_schedule", "warmup_constant_schedule",
    "warmup_cosine_decay_schedule", "warmup_exponential_decay_schedule", "InjectHyperparamsState",
    "InjectStatefulHyperparamsState", "WrappedSchedule", "inject_hyperparams", "inject_stateful_hyperparams",
    # losses
    "losses", "classification_loss", "huber_loss", "l2_loss", "sigmoid_binary_cross_entropy",
    "sigmoid_focal_loss", "smooth_labels", "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels",
    "softmax_focal_loss", "squared_error", "convex_kl_divergence", "cosine_distance", "cosine_similarity",
    "ctc_loss", "ctc_loss_with_forward_probs", "generalized_kl_divergence", "hinge_loss", "kl_divergence",
    "log_cosh", "ntxent", "safe_softmax_cross_entropy",
    # linear algebra and microbatching
    "matrix_inverse_pth_root", "multi_normal", "nnls", "power_iteration", "microbatch",
    # L-BFGS and line searches
    "lbfgs", "scale_by_lbfgs", "ScaleByLBFGSState", "scale_by_zoom_linesearch", "ScaleByZoomLinesearchState",
    "ZoomLinesearchInfo", "scale_by_backtracking_linesearch", "ScaleByBacktrackingLinesearchState",
    "value_and_grad_from_state",
    # submodules
    "tree", "contrib", "microbatching", "perturbations", "projections", "second_order", "transforms", "tree_utils",
]
