"""podlet.config.update(name, value), like jax.config."""
import os

from .. import _core
from . import dtypes


class _Config:
    def __init__(self):
        self._values = {"num_threads": _core.num_threads(), "enable_x64": False,
                        "threefry_partitionable": True,
                        # compile fused elementwise programs to AVX-512 code (same bits)
                        "fused_jit": os.environ.get("PODLET_FUSED_JIT", "1") != "0",
                        # bf16 3x3 stride-1 convs at precision DEFAULT as Winograd F(2x2,
                        # 3x3): faster, ~2.5x the rounding error of the direct kernels; on
                        # unless PODLET_CONV_WINOGRAD=0 (precision HIGHEST: direct per layer)
                        "conv_winograd": _core.conv_winograd_stats()["enabled"]}
        if os.environ.get("JAX_ENABLE_X64", "").lower() in ("1", "true"):
            self.update("enable_x64", True)

    def update(self, name, value):
        key = name[4:] if name.startswith("jax_") else name
        if key == "num_threads":
            n = int(value)
            if n < 1:
                raise ValueError(f"num_threads must be >= 1, got {value}")
            _core.set_num_threads(n)
        elif key == "num_devices":
            from . import pmap
            pmap.set_local_device_count(value)
            value = int(value)
        elif key == "enable_x64":
            dtypes.enable_x64(bool(value))
        elif key == "fused_jit":
            value = bool(value)
            _core.set_fused_jit(value)
        elif key == "conv_winograd":
            value = bool(value)
            _core.set_conv_winograd(value)
        elif key not in self._values:
            raise ValueError(f"unknown config option {name!r}; known: {sorted(self._values)}")
        self._values[key] = value

    def __getattr__(self, name):
        key = name[4:] if name.startswith("jax_") else name
        if key == "num_devices":
            from . import pmap
            return pmap.local_device_count()
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(name) from None


config = _Config()
