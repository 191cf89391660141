"""jax.lax's tokens (issue 26): create_token and after_all.

In XLA a token orders side effects (infeed, outfeed, send / recv) across devices. podlet
runs one host and executes its effects (debug.print / callback) in program order
already, so a token carries no data: it is a pytree with no leaves, which passes
through jit, vmap, grad, scan and cond unchanged (jax's token is one leaf of its own
abstract type; ``tree_leaves(token)`` is ``[]`` here, ``[token]`` in jax).
"""
from .. import tree_util

__all__ = ["Token", "create_token", "after_all"]


class Token:
    """A token value (jax.core.Token): orders nothing on one host, carries no data."""
    __slots__ = ()

    def __repr__(self):
        return "Token()"

    def __eq__(self, other):
        return isinstance(other, Token)

    def __hash__(self):
        return hash(Token)


_TOKEN = Token()
tree_util.register_pytree_node(Token, lambda t: ((), None), lambda aux, children: _TOKEN)


def create_token(_=None):
    """jax.lax.create_token: a token with no preconditions (the argument is ignored, as
    in jax)."""
    return _TOKEN


def after_all(*operands):
    """jax.lax.after_all: merges tokens into one; every operand must be a token
    (TypeError otherwise, jax's message naming the bad operand's type)."""
    for i, x in enumerate(operands):
        if not isinstance(x, Token):
            raise TypeError(f"Arguments to after_all must be tokens; operand {i} is a {type(x).__name__}")
    return _TOKEN
