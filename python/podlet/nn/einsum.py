"""An einsum with a learned kernel and bias (flax.linen.linear.Einsum).

    layer = nn.Einsum((5, 6, 7), 'abc,cde->abde')   # kernel (5, 6, 7), bias (6, 7)

The bias covers the kernel's axes that survive into the result, in the result's order;
ellipses are expanded as opt_einsum (and so Flax) expands them.
"""
from typing import Any

from .. import numpy as jnp
from . import initializers
from .linear import default_kernel_init, promote_dtype
from .module import Module, compact, merge_param

__all__ = ["Einsum"]


def _expand_ellipses(einsum_str, shapes):
    """(operand subscripts, result subscript) of an explicit equation with every '...'
    replaced by letters (opt_einsum.parser.parse_einsum_input's rule: an operand's
    ellipsis takes the last of the fresh letters, the result's takes the longest)."""
    inputs, output = einsum_str.split("->")
    subs = inputs.split(",")
    if "." not in einsum_str:
        return subs, output
    used = set(einsum_str.replace(".", "").replace(",", "").replace("->", ""))
    fresh = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
    longest = 0
    for i, (sub, shape) in enumerate(zip(subs, shapes)):
        if "." not in sub:
            continue
        if sub.count(".") != 3 or sub.count("...") != 1:
            raise ValueError("Invalid Ellipses.")
        count = 0 if len(shape) == 0 else max(len(shape), 1) - (len(sub) - 3)
        if count < 0:
            raise ValueError("Ellipses lengths do not match.")
        longest = max(longest, count)
        subs[i] = sub.replace("...", "".join(fresh[len(fresh) - count:]) if count else "")
    out_ellipsis = "".join(fresh[len(fresh) - longest:]) if longest else ""
    return subs, output.replace("...", out_ellipsis)


class Einsum(Module):
    """``jnp.einsum(einsum_str, inputs, kernel) + bias`` with a learned ``kernel`` of
    shape ``shape``.

    Attributes:
      shape: the kernel's shape.
      einsum_str: the equation, explicit (``'...->...'``) with exactly two operands (the
        input, then the kernel); given here or at call time, not both.
      use_bias: whether to add a bias over the kernel axes kept in the result (default True).
      dtype, param_dtype, precision, kernel_init, bias_init, promote_dtype: as in Dense.
      preferred_element_type: passed to ``jnp.einsum``.

    Params: ``kernel`` (shape), ``bias``.
    """
    shape: Any
    einsum_str: Any = None
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    kernel_init: Any = default_kernel_init
    bias_init: Any = initializers.zeros_init()
    promote_dtype: Any = promote_dtype
    preferred_element_type: Any = None

    @compact
    def __call__(self, inputs, einsum_str=None):
        einsum_str = merge_param("einsum_str", self.einsum_str, einsum_str)
        einsum_str = einsum_str.replace(" ", "")
        if "->" not in einsum_str:
            raise ValueError('`einsum_str` equation must be explicit and include "->".')
        if einsum_str.count(",") != 1:
            raise ValueError("`einsum_str` equation must have exactly two operands and therefore, exactly one "
                             f"comma character, instead of {einsum_str.count(',')}")
        kernel = self.param("kernel", self.kernel_init, self.shape, self.param_dtype)
        if self.use_bias:
            bias_shape, broadcasted_bias_shape = self._get_bias_shape(einsum_str, inputs, kernel)
            bias = self.param("bias", self.bias_init, bias_shape, self.param_dtype)
        else:
            bias = None
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = jnp.einsum(einsum_str, inputs, kernel, precision=self.precision,
                       preferred_element_type=self.preferred_element_type)
        if bias is not None:
            y += jnp.reshape(bias, broadcasted_bias_shape)
        return y

    def _get_bias_shape(self, einsum_str, lhs, rhs):
        """(bias shape, its shape broadcast against the result): the kernel axes whose
        letters appear in the result, in the result's order."""
        (_, rhs_sub), result = _expand_ellipses(einsum_str, [tuple(lhs.shape), tuple(rhs.shape)])
        rhs_dict = {c: i for i, c in enumerate(rhs_sub)}
        assert len(rhs_dict) == len(self.shape)
        broadcasted = [1] * len(result)
        bias_shape = []
        for i, c in enumerate(result):
            if c in rhs_dict:
                broadcasted[i] = self.shape[rhs_dict[c]]
                bias_shape.append(self.shape[rhs_dict[c]])
        return bias_shape, broadcasted
