"""podlet.config.update(name, value), like jax.config."""
import os

import numpy as np

from .. import _core
from . import dtypes

# Flags read on hot paths (bind, jit's __call__), shared by reference with core.py; set
# them through config.update or the context managers of podlet (_src/config_contexts.py).
flags = {"disable_jit": False, "debug_nans": False, "debug_infs": False, "log_compiles": False,
         "check_tracer_leaks": False, "no_tracing": False, "no_execution": False,
         "explain_cache_misses": False, "numpy_dtype_promotion": "standard",
         "numpy_rank_promotion": "allow", "default_device": None, "transfer_guard": "allow",
         "transfer_guard_host_to_device": "allow", "transfer_guard_device_to_host": "allow",
         "transfer_guard_device_to_device": "allow",
         # jax's flags that podlet records (config_contexts.py says what each means here)
         "default_matmul_precision": None, "enable_checks": False, "debug_key_reuse": False,
         "default_prng_impl": "threefry2x32", "legacy_prng_key": "allow", "enable_custom_prng": False,
         "allow_f16_reductions": True, "thread_guard": False, "array_garbage_collection_guard": None,
         # podlet's: bf16 values inside a fused elementwise node stay f32 and round once
         # where they leave it (XLA's --xla_allow_excess_precision, as on a TPU); off:
         # every bf16 op rounds, JAX-on-CPU's bits. PODLET_EXCESS_PRECISION=1 turns it on.
         "allow_excess_precision": os.environ.get("PODLET_EXCESS_PRECISION", "0").lower() in
         ("1", "true", "on", "yes")}
_PRESETS = ("ANY_F8_ANY_F8_F32", "ANY_F8_ANY_F8_F32_FAST_ACCUM", "ANY_F8_ANY_F8_ANY", "ANY_F8_ANY_F8_ANY_FAST_ACCUM",
            "F16_F16_F16", "F16_F16_F32", "BF16_BF16_BF16", "BF16_BF16_F32", "BF16_BF16_F32_X3", "BF16_BF16_F32_X6",
            "BF16_BF16_F32_X9", "TF32_TF32_F32", "TF32_TF32_F32_X3", "F32_F32_F32", "F64_F64_F64")
_CHOICES = {"numpy_dtype_promotion": ("standard", "strict"),
            "numpy_rank_promotion": ("allow", "warn", "raise"),
            "default_matmul_precision": (None, "default", "high", "highest", "bfloat16", "tensorfloat32", "float32",
                                         "bfloat16_3x", *_PRESETS),
            "default_prng_impl": ("threefry2x32", "threefry4x32", "rbg", "unsafe_rbg", "philox2x32", "philox4x32"),
            "legacy_prng_key": ("allow", "warn", "error"),
            "array_garbage_collection_guard": (None, "allow", "log", "fatal"),
            **{k: ("allow", "log", "disallow", "log_explicit", "disallow_explicit")
               for k in flags if k.startswith("transfer_guard")}}


class _Config:
    def __init__(self):
        self._values = {"num_threads": _core.num_threads(), "enable_x64": False,
                        "threefry_partitionable": True,
                        # compile fused elementwise programs to AVX-512 code (same bits)
                        "fused_jit": os.environ.get("PODLET_FUSED_JIT", "1") != "0",
                        # values of one bf16 value read from tables of their 65536 results
                        # inside fused programs (prims/fused.cc; same bits); PODLET_FUSED_TABLES=0
                        "fused_tables": _core.fused_tables_stats()["enabled"],
                        # bf16 3x3 stride-1 convs at precision DEFAULT as Winograd F(2x2,
                        # 3x3): faster, ~2.5x the rounding error of the direct kernels; on
                        # unless PODLET_CONV_WINOGRAD=0 (precision HIGHEST: direct per layer)
                        "conv_winograd": _core.conv_winograd_stats()["enabled"],
                        # Flax's dot_product_attention as the fused primitive when it
                        # computes the same thing (_src/attention.py): "auto" (where it is
                        # the faster), True (always), False (Flax's op-by-op rounding);
                        # PODLET_FUSED_ATTENTION=auto|1|0
                        "fused_attention": {"0": False, "1": True}.get(
                            os.environ.get("PODLET_FUSED_ATTENTION", "auto"), "auto"),
                        # Flax's LayerNorm / RMSNorm and jax.nn.softmax / log_softmax as
                        # the fused row primitives where they compute the same thing
                        # (_src/norm.py); False (PODLET_FUSED_NORMS=0): Flax's op-by-op graph
                        "fused_norms": os.environ.get("PODLET_FUSED_NORMS", "1").lower() not in
                        ("0", "false", "off", "no")}
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
        elif key == "fused_tables":
            value = bool(value)
            _core.set_fused_tables(value)
        elif key == "conv_winograd":
            value = bool(value)
            _core.set_conv_winograd(value)
        elif key == "fused_norms":
            if not isinstance(value, (bool, int, np.bool_)):
                raise ValueError(f"fused_norms must be True or False, got {value!r}")
            value = bool(value)
        elif key == "fused_attention":
            if value != "auto" and not isinstance(value, (bool, int)):
                raise ValueError(f"fused_attention must be 'auto', True or False, got {value!r}")
            value = value if value == "auto" else bool(value)
        elif key in flags:
            if key == "legacy_prng_key" and hasattr(value, "name") and isinstance(value.name, str):
                value = value.name.lower()  # jax's LegacyPrngKeyState
            if key in _CHOICES and value not in _CHOICES[key]:
                raise ValueError(f"{name} must be one of {list(_CHOICES[key])}, got {value!r}")
            if key not in _CHOICES and key != "default_device":
                value = bool(value)
            flags[key] = value
            return
        elif key not in self._values:
            raise ValueError(f"unknown config option {name!r}; known: {sorted([*self._values, *flags])}")
        self._values[key] = value

    def __getattr__(self, name):
        key = name[4:] if name.startswith("jax_") else name
        if key == "num_devices":
            from . import pmap
            return pmap.local_device_count()
        if key in flags:
            return flags[key]
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(name) from None


config = _Config()
