"""podlet.experimental.mesh_utils, as jax.experimental.mesh_utils."""
from .._src.sharding import create_device_mesh  # noqa: F401

__all__ = ["create_device_mesh"]
