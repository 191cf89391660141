"""jax.ad_checkpoint: checkpoint (remat), checkpoint_name and the policies."""
from ._src.remat import checkpoint, remat, checkpoint_name, checkpoint_policies  # noqa: F401

__all__ = ["checkpoint", "remat", "checkpoint_name", "checkpoint_policies"]
