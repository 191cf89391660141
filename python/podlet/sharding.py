"""podlet.sharding, as jax.sharding: Mesh, PartitionSpec (P), NamedSharding,
SingleDeviceSharding.

Sharded computations run once on the host over the global arrays (exactly the unsharded
bits); annotations are checked as JAX checks them, data-parallel layouts (mesh axes of
size > 1 only on dimension 0) are accepted, model-parallel ones raise
NotImplementedError. See ``podlet/_src/sharding.py``.
"""
from ._src.sharding import (Mesh, AbstractMesh, AxisType, PartitionSpec, Sharding, NamedSharding,  # noqa: F401
                            SingleDeviceSharding, make_single_device_sharding, set_mesh, get_mesh,
                            get_abstract_mesh, use_abstract_mesh, reshard)

__all__ = ["Mesh", "AbstractMesh", "AxisType", "PartitionSpec", "Sharding", "NamedSharding", "SingleDeviceSharding",
           "make_single_device_sharding", "set_mesh", "get_mesh", "get_abstract_mesh", "use_abstract_mesh",
           "reshard"]
