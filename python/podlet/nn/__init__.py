"""podlet.nn: jax.nn's activations (and, with the Flax issue, flax.linen's modules)."""
from .activations import (relu, relu6, gelu, silu, swish, sigmoid, log_sigmoid, softplus, tanh, elu,
                          leaky_relu, softmax, log_softmax, logsumexp, one_hot, standardize)
