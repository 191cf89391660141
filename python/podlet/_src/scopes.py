"""jax.named_scope and jax.named_call: names for parts of a computation.

jax puts them in the HLO metadata profilers show. podlet's profiler
(python/podlet/profiler.py) attributes time to primitives, not to scopes, so the name
is kept on a stack (``current_scope()``, '/'-joined as in jax) and nothing else
changes: the values, the graph and its cost are those of the undecorated code."""
import contextlib
import functools

_scopes = []


def current_scope() -> str:
    return "/".join(_scopes)


@contextlib.contextmanager
def named_scope(name: str):
    """``with named_scope('block'): ...``; name must be a string."""
    if not isinstance(name, str):
        raise TypeError("named_scope name argument must be a string.")
    _scopes.append(name)
    try:
        yield
    finally:
        _scopes.pop()


def named_call(fun, *, name: str | None = None):
    """``fun`` run inside ``named_scope(name or fun.__name__)``."""
    scope = name if name is not None else getattr(fun, "__name__", "named_call")

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        with named_scope(scope):
            return fun(*args, **kwargs)

    return wrapped
