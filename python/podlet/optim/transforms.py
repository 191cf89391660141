"""podlet.optim.transforms: optax.transforms (0.2.8), the transformation building blocks
under their optax submodule names (the same objects as ``podlet.optim.<name>``)."""
from ._base import chain, named_chain
from ._clipping import (adaptive_grad_clip, clip_by_block_rms, per_example_global_norm_clip,
                        per_example_layer_norm_clip, unitwise_clip, unitwise_norm)
from ._combine import PartitionState, freeze, partition, selective_transform
from ._constrain import (AddNoiseState, NonNegativeParamsState, ZeroNansState, add_noise, keep_params_nonnegative,
                         zero_nans)
from ._wrappers import (ApplyIfFiniteState, ConditionFn, ConditionallyMaskState, ConditionallyTransformState,
                        MonitorState, MultiSteps, MultiStepsState, ShouldSkipUpdateFunction, SnapshotState,
                        apply_if_finite, conditionally_mask, conditionally_transform, flatten, measure_with_ema,
                        monitor, skip_large_updates, skip_not_finite, snapshot)
from .transform import (EmaState, MaskedNode, MaskedState, TraceState, add_decayed_weights, clip, clip_by_global_norm,
                        ema, masked, trace)

__all__ = ["AddNoiseState", "ApplyIfFiniteState", "ConditionFn", "ConditionallyMaskState",
           "ConditionallyTransformState", "EmaState", "MaskedNode", "MaskedState", "MonitorState", "MultiSteps",
           "MultiStepsState", "NonNegativeParamsState", "PartitionState", "ShouldSkipUpdateFunction", "SnapshotState",
           "TraceState", "ZeroNansState", "adaptive_grad_clip", "add_decayed_weights", "add_noise", "apply_if_finite",
           "chain", "clip", "clip_by_block_rms", "clip_by_global_norm", "conditionally_mask",
           "conditionally_transform", "ema", "flatten", "freeze", "keep_params_nonnegative", "masked",
           "measure_with_ema", "monitor", "named_chain", "partition", "per_example_global_norm_clip",
           "per_example_layer_norm_clip", "selective_transform", "skip_large_updates", "skip_not_finite", "snapshot",
           "trace", "unitwise_clip", "unitwise_norm", "zero_nans"]
