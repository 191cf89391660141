"""Embedding lookup (flax.linen.linear.Embed): ``Embed(num_embeddings, features)``.

The table is the parameter ``embedding`` (num_embeddings, features), initialised by
``variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)`` as in Flax (bit-identical for
the same key). ``__call__`` gathers rows with ``jnp.take`` (jax's semantics: negative
indices count from the end, indices past the end give NaN rows); ``attend`` is the
batched inner product of queries with every row (tied input/output embeddings).
"""
from typing import Any

import numpy as np

from .. import numpy as jnp
from . import initializers
from .linear import promote_dtype
from .module import Module

__all__ = ["Embed", "default_embed_init"]

default_embed_init = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


class Embed(Module):
    """A parameterised map from integers in [0, num_embeddings) to feature vectors.

    Attributes:
      num_embeddings: number of embeddings (vocabulary size).
      features: size of each embedding vector.
      dtype: the dtype of the embedding vectors returned (default: the table's).
      param_dtype: the dtype passed to the initializer (default float32).
      embedding_init: the table's initializer.
      promote_dtype: casts ``(embedding,)`` in ``__call__`` and ``(query, embedding)``
        in ``attend`` to the compute dtype.

    Params: ``embedding`` (num_embeddings, features).
    """
    num_embeddings: int
    features: int
    dtype: Any = None
    param_dtype: Any = jnp.float32
    embedding_init: Any = default_embed_init
    promote_dtype: Any = promote_dtype

    def setup(self):
        self.embedding = self.param("embedding", self.embedding_init, (self.num_embeddings, self.features),
                                    self.param_dtype)

    def __call__(self, inputs):
        """``inputs`` (any shape, integer) -> ``inputs.shape + (features,)``."""
        inputs = jnp.asarray(inputs)
        if not jnp.issubdtype(inputs.dtype, np.integer):
            raise ValueError("Input type must be an integer or unsigned integer.")
        (embedding,) = self.promote_dtype(self.embedding, dtype=self.dtype, inexact=False)
        if self.num_embeddings == 1:
            return jnp.broadcast_to(embedding, tuple(inputs.shape) + (self.features,))
        return jnp.take(embedding, inputs, axis=0)

    def attend(self, query):
        """``query`` (..., features) -> (..., num_embeddings): the inner product of each
        query vector with every embedding (commonly the logits of a tied output layer)."""
        query, embedding = self.promote_dtype(query, self.embedding, dtype=self.dtype)
        return jnp.dot(query, embedding.T)
