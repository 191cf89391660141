"""jax's configuration context managers: ``with podlet.debug_nans(True): ...`` sets
``podlet.config.debug_nans`` for the block and restores it after (also usable as a
decorator, like jax's). What each flag does in podlet:

* ``disable_jit``: ``jit`` calls the Python function op by op.
* ``debug_nans`` / ``debug_infs``: an eager primitive whose output holds a NaN (inf)
  raises ``FloatingPointError("invalid value (nan) encountered in <primitive>")``; a
  jitted function with such an output re-runs op by op to name the primitive.
* ``log_compiles``: jit logs each trace (podlet compiles by tracing).
* ``no_tracing``: a jit cache miss (a trace) raises RuntimeError, jax's message.
* ``no_execution``: running anything (an eager primitive, a jitted, vmapped or
  differentiated graph) raises RuntimeError; tracing (make_jaxpr, eval_shape) works.
* ``explain_cache_misses``: recorded; podlet's jit explains every retrace anyway
  (a warning on the 'podlet.jit' logger naming the argument that changed).
* ``numpy_rank_promotion`` ('allow' | 'warn' | 'raise') and ``numpy_dtype_promotion``
  ('standard' | 'strict'): checked, with jax's messages, by the binary functions that
  podlet.numpy builds in one place (``_binary``: add, subtract, multiply, maximum,
  minimum, the comparisons and bitwise and / or / xor, and their operators); other
  functions (divide, power, where, ...) broadcast and promote as under the defaults.
* ``checking_leaks`` / ``check_tracer_leaks``: podlet always detects a leaked tracer
  when it is used (UnexpectedTracerError); the flag is recorded, nothing more is checked.
* ``transfer_guard*``: podlet has one host device and no transfers to guard; the flag
  is recorded and validated, nothing is logged or refused.
* ``default_device``: recorded; every array lives on the one CPU device.
* ``enable_x64``: podlet's x64 mode (64-bit default dtypes), like ``config.enable_x64``.
* ``threefry_partitionable``: which of jax's threefry schemes podlet.random reproduces.
* ``make_user_context(default)``: a context whose value is part of every jit cache
  key, so a change of value retraces.
* ``default_matmul_precision``: the precision of every matmul / convolution given
  ``precision=None`` (jax's values: 'default' | 'high' | 'highest' | 'bfloat16' |
  'tensorfloat32' | 'float32' | a DotAlgorithmPreset name, and 'bfloat16_3x'); what each
  means in podlet is in ``_src/precision.py`` (f32 products stay exact, as on jax's CPU,
  except under 'bfloat16', 'bfloat16_3x' and the BF16_BF16_F32(_X3/_X6) presets, which
  give a TPU's bf16 numerics).
* ``default_prng_impl``: the impl of keys made without one; podlet.random implements
  'threefry2x32' (the default), another value makes ``random.key`` / ``PRNGKey`` raise
  ValueError naming it.
* ``allow_f16_reductions``: with False, ``lax.reduce_sum`` of a bfloat16 operand over
  an axis of size > 1 raises ValueError (jax's message; podlet has no float16).
* ``allow_excess_precision`` (podlet's, off by default): bf16 values inside a fused
  elementwise chain stay f32 and round once where they leave it, as XLA does with
  ``--xla_allow_excess_precision`` on a TPU; off, every bf16 op rounds as on jax's CPU.
* ``enable_checks`` (jax's internal invariant checks), ``debug_key_reuse`` (tracking of
  typed keys: podlet's keys are raw uint32 arrays), ``legacy_prng_key`` ('allow' |
  'warn' | 'error': podlet has no typed keys, so every key is a raw one and nothing is
  refused), ``enable_custom_prng``, ``thread_guard`` (multi-process dispatch order) and
  ``array_garbage_collection_guard`` (None | 'allow' | 'log' | 'fatal'): validated and
  recorded; podlet has nothing they act on.
"""
import contextlib
import functools
import warnings

from .config import config, flags

_RANK_MESSAGE = ("Operands could not be broadcast together for {name} on shapes {shapes} and with the "
                 "config option jax_numpy_rank_promotion='{mode}'. For more information, see "
                 "https://docs.jax.dev/en/latest/rank_promotion_warning.html.")


class _FlagContext:
    """One flag's context manager / decorator, holding the value to set."""

    def __init__(self, name, value):
        self._name, self._value = name, value

    def __enter__(self):
        self._old = getattr(config, self._name)
        config.update(self._name, self._value)
        return self

    def __exit__(self, *exc):
        config.update(self._name, self._old)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with _FlagContext(self._name, self._value):
                return fn(*args, **kwargs)
        return wrapped


def _flag(name, default=True, doc=""):
    def context(new_val=default):
        return _FlagContext(name, new_val)
    context.__name__ = name
    context.__doc__ = doc or f"Sets podlet.config.{name} inside a ``with`` block."
    return context


def disable_jit(disable: bool = True):
    """Inside the block, ``jit`` runs the Python function op by op (values are concrete,
    so ``print`` and Python control flow on them work)."""
    return _FlagContext("disable_jit", disable)


debug_nans = _flag("debug_nans", doc="Raise FloatingPointError where a NaN is produced.")
debug_infs = _flag("debug_infs", doc="Raise FloatingPointError where an inf is produced.")
log_compiles = _flag("log_compiles", doc="Log (warning level, 'podlet.jit') every jit trace.")
checking_leaks = _flag("check_tracer_leaks", doc="Record jax_check_tracer_leaks (podlet always "
                                                 "reports a leaked tracer when it is used).")
check_tracer_leaks = _flag("check_tracer_leaks", doc=checking_leaks.__doc__)
no_tracing = _flag("no_tracing", doc="Raise RuntimeError when jit would trace.")
no_execution = _flag("no_execution", doc="Raise RuntimeError when anything would run.")
explain_cache_misses = _flag("explain_cache_misses", doc="Recorded: podlet's jit always logs why "
                                                         "it retraces.")
threefry_partitionable = _flag("threefry_partitionable", doc="jax's partitionable threefry "
                                                             "scheme (default) or, with False, its legacy one; "
                                                             "podlet.random follows it bit for bit.")
enable_x64 = _flag("enable_x64", doc="64-bit default dtypes inside the block.")
numpy_rank_promotion = _flag("numpy_rank_promotion", "allow")
numpy_dtype_promotion = _flag("numpy_dtype_promotion", "standard")
default_device = _flag("default_device", None, "Record the default device (podlet has one).")
transfer_guard = _flag("transfer_guard", "allow", "No-op guard: podlet has one host device.")
transfer_guard_host_to_device = _flag("transfer_guard_host_to_device", "allow", transfer_guard.__doc__)
transfer_guard_device_to_host = _flag("transfer_guard_device_to_host", "allow", transfer_guard.__doc__)
transfer_guard_device_to_device = _flag("transfer_guard_device_to_device", "allow",
                                        transfer_guard.__doc__)

default_matmul_precision = _flag("default_matmul_precision", None, "The precision of matmuls and convolutions "
                                 "given precision=None (see podlet/_src/precision.py).")
enable_checks = _flag("enable_checks", doc="Recorded (jax's internal invariant checks).")
debug_key_reuse = _flag("debug_key_reuse", doc="Recorded (podlet's keys are raw uint32 arrays).")
default_prng_impl = _flag("default_prng_impl", "threefry2x32", "The impl of keys made without one (podlet.random "
                                                               "implements 'threefry2x32').")
legacy_prng_key = _flag("legacy_prng_key", "allow", "Recorded: podlet's keys are all raw uint32 arrays.")
enable_custom_prng = _flag("enable_custom_prng", doc="Recorded.")
allow_f16_reductions = _flag("allow_f16_reductions", doc="With False, lax.reduce_sum of bfloat16 raises.")
thread_guard = _flag("thread_guard", doc="Recorded (multi-process dispatch order).")
array_garbage_collection_guard = _flag("array_garbage_collection_guard", None, "Recorded.")
allow_excess_precision = _flag("allow_excess_precision", doc=(
    "Inside the block, bf16 arithmetic inside a fused elementwise chain keeps its f32 value "
    "and rounds to bf16 once, where the value leaves the fusion (XLA's "
    "--xla_allow_excess_precision, what a TPU does); explicit astype(bfloat16) still rounds. "
    "Off (the default): every bf16 operation rounds, JAX-on-CPU's bits. Faster bf16 "
    "elementwise work (the GELU's backward pass: one rounding instead of ~25), results "
    "closer to f32 and different in the last bits from JAX on CPU."))


class _FlagKey:
    """A flag whose value is part of every jit cache key (as in jax): a function traced
    under one default_matmul_precision is traced again under another."""

    def __init__(self, name):
        self.name = name

    @property
    def value(self):
        return flags[self.name]


def _register_jit_keys():
    from . import core
    core.user_contexts.extend(_FlagKey(n) for n in ("default_matmul_precision", "allow_f16_reductions",
                                                       "allow_excess_precision"))


_register_jit_keys()


@contextlib.contextmanager
def ensure_compile_time_eval():
    """jax evaluates operations on concrete values eagerly inside this block even while
    tracing. podlet already does: an operation whose operands are all concrete runs at
    once whether or not a trace is active; only operations on tracers are staged."""
    yield


class TypePromotionError(ValueError):
    """jax's error for an implicit promotion under numpy_dtype_promotion='strict'."""


_JNP_NAMES = {"sub": "subtract", "mul": "multiply", "max": "maximum", "min": "minimum",
              "eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
              "ge": "greater_equal", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor"}


def check_binary(prim, x1, x2):
    """numpy_rank_promotion / numpy_dtype_promotion for a binary elementwise op (called
    by podlet.numpy's ``_binary`` only when a flag is off its default)."""
    mode = flags["numpy_rank_promotion"]
    shapes = [tuple(x.shape) for x in (x1, x2) if getattr(x, "ndim", 0)]
    if mode != "allow" and len(shapes) == 2 and len(shapes[0]) != len(shapes[1]):
        msg = _RANK_MESSAGE.format(name=_JNP_NAMES.get(prim, prim),
                                   shapes=" ".join(map(str, shapes)), mode=mode)
        if mode == "raise":
            raise ValueError(msg)
        warnings.warn(msg, stacklevel=4)
    if flags["numpy_dtype_promotion"] == "strict":
        _check_strict(x1, x2)


def _kind(d):
    import numpy as np
    d = np.dtype(d)
    return 0 if d == np.bool_ else (2 if np.issubdtype(d, np.inexact) or d.name == "bfloat16" else 1)


def _check_strict(x1, x2):
    """Strong operands must share a dtype; a weak one (Python scalar) may not be of a
    higher kind (bool < int < float) than the strong one."""
    import numpy as np
    strong = [np.dtype(x.dtype) for x in (x1, x2)
              if hasattr(x, "dtype") and not getattr(x, "weak_type", False)]
    weak = [x for x in (x1, x2) if not (hasattr(x, "dtype") and not getattr(x, "weak_type", False))]
    bad = len(strong) == 2 and strong[0] != strong[1]
    if len(strong) == 1 and weak:
        w = weak[0]
        wk = _kind(w.dtype) if hasattr(w, "dtype") else (
            0 if isinstance(w, bool) else 1 if isinstance(w, int) else 2)
        bad = wk > _kind(strong[0])
    if bad:
        names = [d.name for d in strong] + [str(type(w)) for w in weak]
        raise TypePromotionError(
            f"Input dtypes {tuple(sorted(names))} have no available implicit dtype promotion "
            "path when jax_numpy_dtype_promotion=strict. Try explicitly casting inputs to the "
            "desired output type, or set jax_numpy_dtype_promotion=standard.")


class UserContext:
    """A value jit's cache depends on (jax.make_user_context): ``with ctx(v): f(x)``
    traces ``f`` again for each new ``v``; ``ctx.value`` reads it."""

    def __init__(self, default_value=None):
        self.value = default_value

    @contextlib.contextmanager
    def __call__(self, new_value):
        old, self.value = self.value, new_value
        try:
            yield
        finally:
            self.value = old


def make_user_context(default_value=None):
    from . import core
    ctx = UserContext(default_value)
    core.user_contexts.append(ctx)
    return ctx
