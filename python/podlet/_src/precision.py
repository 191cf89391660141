"""lax.Precision: jax's per-call precision of convolutions and matmuls, and what it means
in podlet.

podlet's matmuls multiply exactly and accumulate in float32 whatever is asked, so
`precision` only chooses the algorithm of bf16 convolutions: DEFAULT lets a 3x3 stride-1
layer take Winograd F(2x2, 3x3) (about 2.5x the rounding error of the direct kernel, see
kernels/conv_winograd.h), HIGH and HIGHEST keep the direct kernel (exact products). As on
a TPU, DEFAULT is the fast and HIGHEST the exact end.
"""
import enum


class Precision(enum.Enum):
    """jax.lax.Precision: DEFAULT ('bfloat16', 'default'), HIGH ('tensorfloat32', 'high'),
    HIGHEST ('float32', 'highest')."""
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        return _STRINGS.get(value) if isinstance(value, str) else None

    def __str__(self):
        return self.name


_STRINGS = {"bfloat16": Precision.DEFAULT, "default": Precision.DEFAULT,
            "tensorfloat32": Precision.HIGH, "high": Precision.HIGH,
            "float32": Precision.HIGHEST, "highest": Precision.HIGHEST}


def canonicalize_precision(precision):
    """None, or a pair of Precision values (lhs, rhs), from what jax accepts: None, a
    string, a Precision (podlet's or jax's), or a pair of either."""
    if precision is None:
        return None
    if not isinstance(precision, (list, tuple)):
        p = _one(precision, precision)
        return p, p
    if len(precision) == 2:
        return _one(precision[0], precision), _one(precision[1], precision)
    raise ValueError(_message(precision))


def _one(p, whole):
    if isinstance(p, Precision):
        return p
    if isinstance(p, str) and p in _STRINGS:
        return _STRINGS[p]
    if isinstance(getattr(p, "name", None), str) and p.name in Precision.__members__:
        return Precision[p.name]  # jax.lax.Precision, left in a half-ported script
    raise ValueError(_message(whole))


def _message(precision):
    return ("precision must be None, a string in " + str(sorted(_STRINGS)) + ", a lax.Precision value, "
            f"or a pair of those (lhs, rhs); got {precision!r}")


def conv_attr(precision):
    """The conv primitives' 'precision' attr: the higher of the pair's names ('high',
    'highest'; both mean the direct kernel), or None for DEFAULT (the kernel may choose
    Winograd)."""
    pair = canonicalize_precision(precision)
    top = None if pair is None else max(pair, key=lambda p: p.value)
    return None if top in (None, Precision.DEFAULT) else top.name.lower()
