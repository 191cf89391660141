"""podlet.experimental, like jax.experimental: multihost_utils."""
