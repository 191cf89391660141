"""flax.training.train_state: a pytree holding step, params, optimizer and its state.

    state = TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optax.adamw(1e-3))
    grads = podlet.grad(loss_fn)(state.params)
    state = state.apply_gradients(grads=grads)     # step + 1, params and opt_state updated

Subclass it to carry more state, as Flax users do:

    class TrainState(train_state.TrainState):
        batch_stats: Any = None
        ema_params: Any = None
        rng: Any = struct.field(pytree_node=True, default=None)

``apply_fn`` and ``tx`` are static (treedef auxiliary data); ``step``, ``params`` and
``opt_state`` (and subclass fields) are pytree children.
"""
from typing import Any, Callable

from .. import struct

__all__ = ["TrainState"]


def _apply_updates(params, updates):
    from ..optim import apply_updates  # imported on use: podlet.optim imports nothing from here
    return apply_updates(params, updates)


class TrainState(struct.PyTreeNode):
    """Train state for the common case of one Optax-style optimizer.

    Attributes:
      step: counter, 0 at ``create`` and incremented by every ``apply_gradients``.
      apply_fn: usually ``model.apply`` (static).
      params: the parameters updated by ``tx``.
      tx: a GradientTransformation (``init(params)``, ``update(grads, state, params)``; static).
      opt_state: the state of ``tx``.
    """
    step: Any
    apply_fn: Callable = struct.field(pytree_node=False)
    params: Any = struct.field(pytree_node=True)
    tx: Any = struct.field(pytree_node=False)
    opt_state: Any = struct.field(pytree_node=True)

    def apply_gradients(self, *, grads, **kwargs):
        """``step + 1``; params and opt_state updated by ``tx.update`` + ``apply_updates``;
        other fields replaced from `kwargs`."""
        updates, new_opt_state = self.tx.update(grads, self.opt_state, self.params)
        new_params = _apply_updates(self.params, updates)
        return self.replace(step=self.step + 1, params=new_params, opt_state=new_opt_state, **kwargs)

    @classmethod
    def create(cls, *, apply_fn, params, tx, **kwargs):
        """A new state with ``step=0`` and ``opt_state = tx.init(params)``."""
        opt_state = tx.init(params)
        return cls(step=0, apply_fn=apply_fn, params=params, tx=tx, opt_state=opt_state, **kwargs)
