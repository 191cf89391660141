"""flax.training.dynamic_scale: dynamic loss scaling for low-precision gradients.

The loss is multiplied by ``scale`` before differentiation and the gradients divided by
it (in float32), so small gradients survive a float16 / bfloat16 backward pass. After
``growth_interval`` finite steps in a row the scale grows by ``growth_factor``; a step
with a non-finite gradient shrinks it by ``backoff_factor`` (not below
``minimum_scale``) and restarts the count. The caller skips that step's update:

    dyn_scale, is_fin, loss, grads = dyn_scale.value_and_grad(loss_fn)(params)
    new_state = state.apply_gradients(grads=grads)
    state = jax.tree_util.tree_map(lambda a, b: jnp.where(is_fin, a, b), new_state, state)

With ``axis_name`` the gradients are averaged over that pmap axis (``lax.pmean``) before
the finiteness check, so every replica takes the same decision.
"""
import functools
from typing import Any, NamedTuple

import numpy as np

from .. import lax
from .. import numpy as jnp
from .. import struct
from .. import tree_util

__all__ = ["DynamicScale", "DynamicScaleResult"]


class DynamicScaleResult(NamedTuple):
    dynamic_scale: "DynamicScale"
    finite: Any
    aux: Any
    grad: Any


class DynamicScale(struct.PyTreeNode):
    """Dynamic loss scale (a pytree: ``fin_steps`` and ``scale`` are its leaves).

    Attributes:
      growth_factor: the scale's growth after ``growth_interval`` finite steps (2.0).
      backoff_factor: the scale's factor after a non-finite gradient (0.5).
      growth_interval: finite steps in a row before growing (2000).
      fin_steps: finite steps in a row so far.
      scale: the current loss scale (65536.0).
      minimum_scale: the scale's lower bound (the smallest positive normal float32; None: none).
    """
    growth_factor: float = struct.field(pytree_node=False, default=2.0)
    backoff_factor: float = struct.field(pytree_node=False, default=0.5)
    growth_interval: int = struct.field(pytree_node=False, default=2000)
    fin_steps: Any = 0
    scale: Any = 65536.0
    minimum_scale: Any = struct.field(pytree_node=False, default=np.finfo(np.float32).tiny)

    def value_and_grad(self, fun, argnums=0, has_aux=False, axis_name=None):
        """``value_and_grad`` of the scaled `fun`: a function of `fun`'s arguments returning
        ``DynamicScaleResult(new dynamic_scale, finite, value (or (value, aux)), grad)``,
        value and grad unscaled (grads in float32)."""
        from .. import value_and_grad as _value_and_grad  # podlet's top level imports podlet.training lazily

        @functools.wraps(fun)
        def loss_wrapper(*args):
            aux = fun(*args)
            if has_aux:
                return (self.scale * aux[0], aux[1])
            return self.scale * aux

        grad_fn = _value_and_grad(loss_wrapper, argnums, has_aux)

        def grad_fn_wrapper(*args):
            aux, grad = grad_fn(*args)
            aux = (aux[0] / self.scale, aux[1]) if has_aux else aux / self.scale
            grad = tree_util.tree_map(lambda g: jnp.asarray(g, jnp.float32) / self.scale, grad)
            if axis_name is not None:
                grad = lax.pmean(grad, axis_name)
            finite = jnp.array(True)
            for g in tree_util.tree_leaves(grad):
                finite &= jnp.all(lax.is_finite(g))
            grow = self.fin_steps == self.growth_interval
            fin_scale = jnp.where(grow & finite,
                                  jnp.minimum(self.scale * self.growth_factor, np.finfo(np.float32).max),
                                  self.scale)
            inf_scale = self.scale * self.backoff_factor
            if self.minimum_scale is not None:
                inf_scale = jnp.maximum(inf_scale, self.minimum_scale)
            new_scale = jnp.where(finite, fin_scale, inf_scale)
            new_fin_steps = jnp.where(grow | (~finite), 0, self.fin_steps + 1)
            new_self = self.replace(fin_steps=new_fin_steps, scale=new_scale)
            return DynamicScaleResult(new_self, finite, aux, grad)

        return grad_fn_wrapper
