"""podlet.nn: jax.nn's activations and flax.linen's module system and layers.

    from podlet import nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(nn.relu(nn.Dense(16)(x)))
"""
from .activations import (relu, relu6, gelu, silu, swish, sigmoid, log_sigmoid, softplus, tanh, elu,
                          leaky_relu, softmax, log_softmax, logsumexp, one_hot, standardize, identity, celu, selu,
                          glu, hard_sigmoid, hard_silu, hard_swish, hard_tanh, mish, soft_sign, sparse_plus,
                          sparse_sigmoid, squareplus, log1mexp, logmeanexp, normalize, PReLU)
from . import initializers
from .initializers import ones, ones_init, zeros, zeros_init
from .module import (Module, compact, compact_name_scope, share_scope, nowrap, merge_param, Variable, Scope, DenyList, apply, init,
                     init_with_output, tabulate, errors, FlaxError, intercept_methods, enable_named_call,
                     disable_named_call, override_named_call, named_call)
from .linear import Dense, DenseGeneral, Conv, ConvLocal, ConvTranspose, canonicalize_dtype, promote_dtype
from .embedding import Embed
from .einsum import Einsum
from .combinators import Sequential, BatchApply
from .frozen_dict import FrozenDict
from .recurrent import (RNNCellBase, LSTMCell, OptimizedLSTMCell, GRUCell, MGUCell, SimpleCell, ConvLSTMCell,
                        RNN, Bidirectional)
from .normalization import BatchNorm, LayerNorm, GroupNorm, RMSNorm, InstanceNorm, SpectralNorm, WeightNorm
from .stochastic import Dropout, DropPath
from .pooling import pool, avg_pool, max_pool, min_pool
from .attention import (MultiHeadDotProductAttention, MultiHeadAttention, SelfAttention, dot_product_attention,
                        dot_product_attention_weights, make_attention_mask, make_causal_mask, combine_masks)
from .transforms import (vmap, scan, remat, checkpoint, jit, cond, switch, while_loop, map_variables, remat_scan,
                         broadcast, vjp, jvp, grad, value_and_grad, custom_vjp, fold_rngs)
from . import meta, spmd  # noqa: E402  (flax.core.meta, flax.linen.spmd)
from .meta import Partitioned, with_partitioning, get_partition_spec, get_sharding, unbox, PARTITION_NAME  # noqa: E402
from .spmd import (LogicallyPartitioned, with_logical_partitioning, logical_to_mesh_axes, logical_to_mesh,  # noqa: E402
                   logical_to_mesh_sharding, with_logical_constraint, logical_axis_rules, set_logical_axis_rules,
                   get_logical_axis_rules, add_metadata_axis)
from . import partitioning  # noqa: E402  (flax.linen.partitioning)
