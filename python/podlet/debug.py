"""jax.debug: print and callback on a computation's values, eagerly and under jit,
vmap and grad (how and when they run: python/podlet/_src/debugging.py)."""
from ._src.debugging import callback, debug_print as print  # noqa: A001

__all__ = ["print", "callback"]
