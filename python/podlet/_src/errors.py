"""podlet's exception types (created by the C++ core so both sides raise the same ones)."""
from .. import _core

PodletError = _core.PodletError          # base; also a ValueError
ShapeError = _core.ShapeError
DTypeError = _core.DTypeError            # also a TypeError


class ConcretizationError(PodletError, TypeError):
    """A traced (abstract) value was used where a concrete value is needed."""


class UnexpectedTracerError(PodletError):
    """A tracer escaped the transformation that created it."""


class NonConcreteBooleanIndexError(PodletError, IndexError):
    """A boolean mask index was traced: the result's shape would depend on its values."""
