"""L-BFGS and its line searches (``optax/_src/linesearch.py`` and ``scale_by_lbfgs``
in ``transform.py``), as optax 0.2.8 writes them:

    scale_by_lbfgs                    u <- P_k u (the two-loop recursion over a memory
                                      of parameter and gradient differences)
    scale_by_zoom_linesearch          a step size meeting the strong Wolfe conditions
                                      (Nocedal & Wright, Algorithms 3.5-3.6)
    scale_by_backtracking_linesearch  a step size meeting the Armijo condition
    value_and_grad_from_state         reuses the value and gradient the line search
                                      stored in the state

    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(f)
    value, grad = value_and_grad(params, state=opt_state)
    updates, opt_state = opt.update(grad, opt_state, params, value=value, grad=grad, value_fn=f)

The searches are ``lax.while_loop`` s whose bodies evaluate ``value_fn`` (and its
gradient) at trial points, so a whole L-BFGS step traces under ``podlet.jit``.
``verbose=True`` needs ``jax.debug.print`` inside the traced loops, which podlet does
not have: it raises.
"""
import functools
import inspect
import operator
from typing import Any, Callable, NamedTuple

from .. import lax
from .. import numpy as jnp
from .. import tree_util as _tu
from .._src.core import value_and_grad as _value_and_grad
from ._base import GradientTransformation, GradientTransformationExtraArgs, safe_increment, tree_cast_like
from . import tree as _tree


def _no_verbose(verbose, what):
    if verbose:
        raise NotImplementedError(f"{what}(verbose=True) prints from inside a traced loop with jax.debug.print, "
                                  "which podlet does not have; read the step's info from the state instead")


def _val_dtype(params):
    return jnp.asarray(_tu.tree_leaves(params)[0]).dtype


def _extract_fns_kwargs(fns, kwargs):
    """The extra arguments each function accepts, and those none accepts."""
    fns_arg_names = [list(inspect.signature(fn).parameters.keys()) for fn in fns]
    fns_kwargs = [{k: v for k, v in kwargs.items() if k in names} for names in fns_arg_names]
    all_names = functools.reduce(operator.add, fns_arg_names)
    return fns_kwargs, {k: v for k, v in kwargs.items() if k not in all_names}


def _check_consumed(remaining, what):
    if remaining:
        raise TypeError(f"Unexpected keyword arguments passed to `{what}.update`. These arguments were not consumed "
                        f"by `value_fn`: {sorted(remaining.keys())}. Ensure that all extra keyword arguments are "
                        "accepted by `value_fn`.")


# ---------------------------------------------------------------------------------
# backtracking (Armijo)
# ---------------------------------------------------------------------------------
class BacktrackingLinesearchInfo(NamedTuple):
    """Steps taken and the final decrease error of a backtracking search."""
    num_linesearch_steps: Any
    decrease_error: Any


class ScaleByBacktrackingLinesearchState(NamedTuple):
    """The accepted step size, the value there (and the gradient with
    ``store_grad``), and the search's info."""
    learning_rate: Any
    value: Any
    grad: Any
    info: BacktrackingLinesearchInfo


class BacktrackingLineSearchState(NamedTuple):
    """The loop state of a backtracking search."""
    learning_rate: Any
    new_value: Any
    new_grad: Any
    decrease_error: Any
    iter_num: Any


def scale_by_backtracking_linesearch(max_backtracking_steps, slope_rtol=1e-4, decrease_factor=0.8,
                                     increase_factor=1.5, max_learning_rate=1.0, atol=0.0, rtol=0.0,
                                     store_grad: bool = False,
                                     verbose: bool = False) -> GradientTransformationExtraArgs:
    """Scales the updates by the largest step ``eta`` found by backtracking (from
    ``min(increase_factor * previous, max_learning_rate)``, times ``decrease_factor``)
    with ``f(x + eta u) <= (1 + rtol) f(x) + eta * slope_rtol * <u, grad>`` (+ atol).

    ``update`` takes the extra arguments ``value`` (of ``value_fn`` at ``params``),
    ``grad`` and ``value_fn`` (plus any keyword arguments ``value_fn`` accepts).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state
      ``ScaleByBacktrackingLinesearchState(learning_rate, value, grad, info)``.
    """
    _no_verbose(verbose, "scale_by_backtracking_linesearch")

    def init_fn(params):
        val_dtype = _val_dtype(params)
        return ScaleByBacktrackingLinesearchState(
            learning_rate=jnp.asarray(1.0, dtype=val_dtype), value=jnp.asarray(jnp.inf, dtype=val_dtype),
            grad=_tree.zeros_like(params) if store_grad else None,
            info=BacktrackingLinesearchInfo(num_linesearch_steps=jnp.asarray(0),
                                            decrease_error=jnp.asarray(jnp.inf, dtype=val_dtype)))

    def _compute_decrease_error(stepsize, slope, value, new_value):
        decrease_error = new_value - (1.0 + rtol) * value - stepsize * slope_rtol * slope
        decrease_error = jnp.where(jnp.isnan(decrease_error), jnp.inf, decrease_error)
        return jnp.maximum(decrease_error, 0.0)

    def update_fn(updates, state, params, *, value, grad, value_fn, **extra_args):
        (fn_kwargs,), remaining = _extract_fns_kwargs((value_fn,), extra_args)
        _check_consumed(remaining, "scale_by_backtracking_linesearch")
        slope = _tree.vdot(updates, grad)
        value_fn_ = functools.partial(value_fn, **fn_kwargs)

        def cond_fn(s):
            return jnp.logical_and(jnp.logical_not(s.decrease_error <= atol), s.iter_num <= max_backtracking_steps)

        def body_fn(s):
            learning_rate = jnp.where(s.iter_num > 0, decrease_factor * s.learning_rate, s.learning_rate)
            new_params = _tree.add_scale(params, learning_rate, updates)
            new_grad = s.new_grad
            if store_grad:
                new_value = value_fn_(new_params)
                decrease_error = _compute_decrease_error(learning_rate, slope, value, new_value)
                new_grad = lax.cond(jnp.logical_or(decrease_error <= atol, s.iter_num == max_backtracking_steps),
                                    lambda p: _value_and_grad(value_fn_)(p)[1], lambda p: s.new_grad, new_params)
            else:
                new_value = value_fn_(new_params)
                decrease_error = _compute_decrease_error(learning_rate, slope, value, new_value)
            new_s = BacktrackingLineSearchState(learning_rate=learning_rate, new_value=new_value, new_grad=new_grad,
                                                decrease_error=decrease_error, iter_num=s.iter_num + 1)
            return tree_cast_like(new_s, s)

        learning_rate = jnp.minimum(increase_factor * state.learning_rate, max_learning_rate)
        search_state = BacktrackingLineSearchState(learning_rate=learning_rate, new_value=jnp.asarray(value),
                                                   new_grad=_tree.zeros_like(params),
                                                   decrease_error=jnp.asarray(jnp.inf), iter_num=jnp.asarray(0))
        search_state = lax.while_loop(cond_fn, body_fn, search_state)
        new_learning_rate = jnp.where(jnp.isinf(search_state.decrease_error), 0.0, search_state.learning_rate)
        new_state = ScaleByBacktrackingLinesearchState(
            learning_rate=new_learning_rate, value=search_state.new_value,
            grad=search_state.new_grad if store_grad else None,
            info=BacktrackingLinesearchInfo(num_linesearch_steps=search_state.iter_num,
                                            decrease_error=search_state.decrease_error))
        return _tree.scale(new_learning_rate, updates), tree_cast_like(new_state, state)

    return GradientTransformationExtraArgs(init_fn, update_fn)


# ---------------------------------------------------------------------------------
# zoom (strong Wolfe)
# ---------------------------------------------------------------------------------
class ZoomLinesearchState(NamedTuple):
    """The loop state of a zoom line search."""
    count: Any
    params: Any
    updates: Any
    stepsize_guess: Any
    stepsize: Any
    value: Any
    grad: Any
    slope: Any
    value_init: Any
    slope_init: Any
    decrease_error: Any
    curvature_error: Any
    error: Any
    interval_found: Any
    done: Any
    failed: Any
    low: Any
    value_low: Any
    slope_low: Any
    high: Any
    value_high: Any
    slope_high: Any
    cubic_ref: Any
    value_cubic_ref: Any
    safe_stepsize: Any
    safe_value: Any
    safe_grad: Any


def _cubicmin(a, fa, fpa, b, fb, c, fc):
    """Minimiser of the cubic through (a, fa), (b, fb), (c, fc) with slope fpa at a."""
    C = fpa
    db = b - a
    dc = c - a
    denom = (db * dc) ** 2 * (db - dc)
    e1, e2 = fb - fa - C * db, fc - fa - C * dc
    A = (dc ** 2 * e1 + -(db ** 2) * e2) / denom
    B = (-(dc ** 3) * e1 + db ** 3 * e2) / denom
    radical = B * B - 3.0 * A * C
    return a + (-B + jnp.sqrt(radical)) / (3.0 * A)


def _quadmin(a, fa, fpa, b, fb):
    """Minimiser of the quadratic through (a, fa), (b, fb) with slope fpa at a."""
    D, C = fa, fpa
    db = b - a
    B = (fb - D - C * db) / (db ** 2)
    return a - C / (2.0 * B)


def _zoom_linesearch(max_linesearch_steps, max_stepsize=None, tol=0.0, increase_factor=2.0, slope_rtol=1e-4,
                     curv_rtol=0.9, approx_dec_rtol=1e-6, interval_threshold=1e-5):
    """(init, step, cond) of the zoom line search; ``step`` either grows the step to
    bracket an interval or zooms into it by cubic / quadratic / bisection steps."""

    def _value_and_slope_on_line(value_and_grad_fn, params, stepsize, updates, fn_kwargs):
        step = _tree.add_scale(params, stepsize, updates)
        value_step, grad_step = value_and_grad_fn(step, **fn_kwargs)
        return step, value_step, grad_step, _tree.vdot(grad_step, updates)

    def _compute_decrease_error(stepsize, value_step, slope_step, value_init, slope_init):
        decrease_error = value_step - value_init - slope_rtol * stepsize * slope_init
        if approx_dec_rtol is not None:
            approx_decrease_error = slope_step - (2 * slope_rtol - 1.0) * slope_init
            delta_values = value_step - value_init - approx_dec_rtol * jnp.abs(value_init)
            approx_decrease_error = jnp.maximum(approx_decrease_error, delta_values)
            decrease_error = jnp.minimum(approx_decrease_error, decrease_error)
        decrease_error = jnp.maximum(decrease_error, 0.0)
        return jnp.where(jnp.isnan(decrease_error), jnp.inf, decrease_error)

    def _compute_curvature_error(slope_step, slope_init):
        curvature_error = jnp.maximum(jnp.abs(slope_step) - curv_rtol * jnp.abs(slope_init), 0.0)
        return jnp.where(jnp.isnan(curvature_error), jnp.inf, curvature_error)

    def _try_safe_step(state):
        outside_domain = jnp.isinf(state.decrease_error)
        final_stepsize, final_value, final_grad = _tree.where(
            jnp.logical_or(state.safe_stepsize > 0.0, outside_domain),
            [state.safe_stepsize, state.safe_value, state.safe_grad], [state.stepsize, state.value, state.grad])
        final = state._replace(stepsize=final_stepsize, grad=final_grad, value=final_value)
        return tree_cast_like(final, state)

    def _search_interval(state, value_and_grad_fn, fn_kwargs):
        iter_num = state.count
        new_stepsize = jnp.where(iter_num == 0, state.stepsize_guess, increase_factor * state.stepsize)
        if max_stepsize is not None:
            max_stepsize_reached = new_stepsize >= max_stepsize
            new_stepsize = jnp.minimum(new_stepsize, max_stepsize)
        else:
            max_stepsize_reached = jnp.asarray(False)
        _, new_value_step, new_grad_step, new_slope_step = _value_and_slope_on_line(
            value_and_grad_fn, state.params, new_stepsize, state.updates, fn_kwargs)
        decrease_error = _compute_decrease_error(new_stepsize, new_value_step, new_slope_step, state.value_init,
                                                 state.slope_init)
        curvature_error = _compute_curvature_error(new_slope_step, state.slope_init)
        new_error = jnp.maximum(decrease_error, curvature_error)
        new_safe_stepsize, new_safe_value, new_safe_grad = _tree.where(
            decrease_error <= tol, [new_stepsize, new_value_step, new_grad_step],
            [state.safe_stepsize, state.safe_value, state.safe_grad])
        set_high_to_new = jnp.logical_or(decrease_error > 0.0,
                                         jnp.logical_and(new_value_step >= state.value, iter_num > 0))
        set_low_to_new = jnp.logical_and(new_slope_step >= 0.0, jnp.logical_not(set_high_to_new))
        default = [state.stepsize, state.value, state.slope, new_stepsize, new_value_step, new_slope_step]
        candidate = [new_stepsize, new_value_step, new_slope_step, state.stepsize, state.value, state.slope]
        low, value_low, slope_low, high, value_high, slope_high = _tree.where(set_low_to_new, candidate, default)
        interval_found = set_high_to_new | set_low_to_new | (new_error <= tol)
        done = (new_error <= tol) | (max_stepsize_reached & jnp.logical_not(interval_found))
        failed = (iter_num + 1 >= max_linesearch_steps) & jnp.logical_not(done)
        new_state = ZoomLinesearchState(
            count=safe_increment(iter_num), params=state.params, updates=state.updates,
            stepsize_guess=state.stepsize_guess, stepsize=new_stepsize, value=new_value_step, grad=new_grad_step,
            slope=new_slope_step, value_init=state.value_init, slope_init=state.slope_init,
            decrease_error=decrease_error, curvature_error=curvature_error, error=new_error,
            interval_found=jnp.asarray(interval_found), done=jnp.asarray(done), failed=jnp.asarray(failed),
            low=low, value_low=value_low, slope_low=slope_low, high=high, value_high=value_high,
            slope_high=slope_high, cubic_ref=low, value_cubic_ref=value_low, safe_stepsize=new_safe_stepsize,
            safe_value=new_safe_value, safe_grad=new_safe_grad)
        return tree_cast_like(new_state, state)

    def _zoom_into_interval(state, value_and_grad_fn, fn_kwargs):
        iter_num = state.count
        low, value_low, slope_low = state.low, state.value_low, state.slope_low
        high, value_high, slope_high = state.high, state.value_high, state.slope_high
        delta = jnp.abs(high - low)
        left, right = jnp.minimum(high, low), jnp.maximum(high, low)
        cubic_chk, quad_chk = 0.2 * delta, 0.1 * delta
        too_small_int = delta <= interval_threshold
        middle_cubic = _cubicmin(low, value_low, slope_low, high, value_high, state.cubic_ref, state.value_cubic_ref)
        use_cubic = (middle_cubic > left + cubic_chk) & (middle_cubic < right - cubic_chk)
        middle_quad = _quadmin(low, value_low, slope_low, high, value_high)
        use_quad = jnp.logical_not(use_cubic) & (middle_quad > left + quad_chk) & (middle_quad < right - quad_chk)
        use_bisection = jnp.logical_not(use_cubic) & jnp.logical_not(use_quad)
        middle = jnp.where(use_cubic, middle_cubic, state.cubic_ref)
        middle = jnp.where(use_quad, middle_quad, middle)
        middle = jnp.where(use_bisection, (low + high) / 2.0, middle)
        _, value_middle, grad_middle, slope_middle = _value_and_slope_on_line(
            value_and_grad_fn, state.params, middle, state.updates, fn_kwargs)
        decrease_error = _compute_decrease_error(middle, value_middle, slope_middle, state.value_init,
                                                 state.slope_init)
        curvature_error = _compute_curvature_error(slope_middle, state.slope_init)
        new_error = jnp.maximum(decrease_error, curvature_error)
        update_safe = (decrease_error <= tol) & (value_middle < state.safe_value)
        new_safe_stepsize, new_safe_value, new_safe_grad = _tree.where(
            update_safe, [middle, value_middle, grad_middle], [state.safe_stepsize, state.safe_value, state.safe_grad])
        done = new_error <= tol
        set_high_to_middle = (decrease_error > 0.0) | (value_middle >= value_low)
        set_high_to_low = (slope_middle * (high - low) >= 0.0) & jnp.logical_not(set_high_to_middle)
        set_low_to_middle = jnp.logical_not(set_high_to_middle)
        new_high_, new_value_high_, new_slope_high_ = _tree.where(
            set_high_to_middle, [middle, value_middle, slope_middle], [high, value_high, slope_high])
        new_high, new_value_high, new_slope_high = _tree.where(
            set_high_to_low, [low, value_low, slope_low], [new_high_, new_value_high_, new_slope_high_])
        new_low, new_value_low, new_slope_low = _tree.where(
            set_low_to_middle, [middle, value_middle, slope_middle], [low, value_low, slope_low])
        new_cubic_ref, new_value_cubic_ref = _tree.where(set_high_to_middle | set_high_to_low, [high, value_high],
                                                         [low, value_low])
        max_iter_reached = (iter_num + 1) >= max_linesearch_steps
        presumably_failed = jnp.asarray(max_iter_reached) | (too_small_int & (new_safe_stepsize > 0.0))
        failed = presumably_failed & jnp.logical_not(done)
        new_state = ZoomLinesearchState(
            count=safe_increment(iter_num), params=state.params, updates=state.updates,
            stepsize_guess=state.stepsize_guess, stepsize=middle, value=value_middle, grad=grad_middle,
            slope=slope_middle, value_init=state.value_init, slope_init=state.slope_init,
            decrease_error=decrease_error, curvature_error=curvature_error, error=new_error,
            interval_found=state.interval_found, done=done, failed=failed, low=new_low, value_low=new_value_low,
            slope_low=new_slope_low, high=new_high, value_high=new_value_high, slope_high=new_slope_high,
            cubic_ref=new_cubic_ref, value_cubic_ref=new_value_cubic_ref, safe_stepsize=new_safe_stepsize,
            safe_value=new_safe_value, safe_grad=new_safe_grad)
        return tree_cast_like(new_state, state)

    def init_fn(updates, params, *, value, grad, prev_stepsize=1.0, initial_guess_strategy: str = "one"):
        if initial_guess_strategy == "one":
            stepsize_guess = jnp.asarray(1.0)
        elif initial_guess_strategy == "keep":
            stepsize_guess = prev_stepsize
        else:
            raise ValueError(f"Unknown initial guess strategy: {initial_guess_strategy}")
        val_dtype = _val_dtype(params)
        slope = _tree.vdot(updates, grad)
        value = jnp.asarray(value)
        return ZoomLinesearchState(
            count=jnp.asarray(0), params=params, updates=updates, stepsize_guess=stepsize_guess,
            stepsize=jnp.asarray(0.0, dtype=val_dtype), value=jnp.asarray(value, dtype=val_dtype), grad=grad,
            slope=slope, value_init=value, slope_init=slope, decrease_error=jnp.asarray(jnp.inf),
            curvature_error=jnp.asarray(jnp.inf), error=jnp.asarray(jnp.inf), interval_found=jnp.asarray(False),
            done=jnp.asarray(False), failed=jnp.asarray(False), low=jnp.asarray(0.0), value_low=value,
            slope_low=slope, high=jnp.asarray(0.0), value_high=value, slope_high=slope, cubic_ref=jnp.asarray(0.0),
            value_cubic_ref=value, safe_stepsize=jnp.asarray(0.0), safe_value=value, safe_grad=grad)

    def step_fn(state, *, value_and_grad_fn, fn_kwargs):
        new_state = lax.cond(state.interval_found,
                             functools.partial(_zoom_into_interval, value_and_grad_fn=value_and_grad_fn,
                                               fn_kwargs=fn_kwargs),
                             functools.partial(_search_interval, value_and_grad_fn=value_and_grad_fn,
                                               fn_kwargs=fn_kwargs),
                             state)
        new_state = lax.cond(new_state.failed, _try_safe_step, lambda x: x, new_state)
        return tree_cast_like(new_state, state)

    def cond_fn(state):
        return jnp.logical_not(state.done | state.failed)

    return init_fn, step_fn, cond_fn


class ZoomLinesearchInfo(NamedTuple):
    """Steps taken and the final errors of a zoom search."""
    num_linesearch_steps: Any
    decrease_error: Any
    curvature_error: Any


class ScaleByZoomLinesearchState(NamedTuple):
    """The accepted step size, the value and gradient there, and the search's info."""
    learning_rate: Any
    value: Any
    grad: Any
    info: ZoomLinesearchInfo


def scale_by_zoom_linesearch(max_linesearch_steps, max_learning_rate=None, tol=0.0, increase_factor=2.0,
                             slope_rtol=1e-4, curv_rtol=0.9, approx_dec_rtol=1e-6, stepsize_precision=1e-5,
                             initial_guess_strategy: str = "keep",
                             verbose: bool = False) -> GradientTransformationExtraArgs:
    """Scales the updates by a step size meeting the strong Wolfe conditions
    (sufficient decrease ``slope_rtol``, curvature ``curv_rtol``; with
    ``approx_dec_rtol`` the approximate Wolfe conditions of Hager & Zhang), found by
    growing the step by ``increase_factor`` until an interval is bracketed, then
    zooming into it.

    ``update`` takes the extra arguments ``value``, ``grad`` (at ``params``) and
    ``value_fn`` (plus any keyword arguments ``value_fn`` accepts).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state
      ``ScaleByZoomLinesearchState(learning_rate, value, grad, info)``.
    """
    _no_verbose(verbose, "scale_by_zoom_linesearch")
    init_ls, step_ls, cond_ls = _zoom_linesearch(
        max_linesearch_steps=max_linesearch_steps, max_stepsize=max_learning_rate, tol=tol,
        increase_factor=increase_factor, slope_rtol=slope_rtol, curv_rtol=curv_rtol, approx_dec_rtol=approx_dec_rtol,
        interval_threshold=stepsize_precision)

    def init_fn(params):
        val_dtype = _val_dtype(params)
        return ScaleByZoomLinesearchState(
            learning_rate=jnp.asarray(1.0, dtype=val_dtype), value=jnp.asarray(jnp.inf, dtype=val_dtype),
            grad=_tree.zeros_like(params),
            info=ZoomLinesearchInfo(num_linesearch_steps=jnp.asarray(0), decrease_error=jnp.asarray(jnp.inf),
                                    curvature_error=jnp.asarray(jnp.inf)))

    def update_fn(updates, state, params, *, value, grad, value_fn, **extra_args):
        (fn_kwargs,), remaining = _extract_fns_kwargs((value_fn,), extra_args)
        _check_consumed(remaining, "scale_by_zoom_linesearch")
        init_state = init_ls(updates, params, value=value, grad=grad, prev_stepsize=state.learning_rate,
                             initial_guess_strategy=initial_guess_strategy)
        final_state = lax.while_loop(
            cond_ls, functools.partial(step_ls, value_and_grad_fn=_value_and_grad(value_fn), fn_kwargs=fn_kwargs),
            init_state)
        learning_rate = final_state.stepsize
        new_state = ScaleByZoomLinesearchState(
            learning_rate=learning_rate, value=final_state.value, grad=final_state.grad,
            info=ZoomLinesearchInfo(num_linesearch_steps=final_state.count,
                                    decrease_error=final_state.decrease_error,
                                    curvature_error=final_state.curvature_error))
        return _tree.scale(learning_rate, updates), tree_cast_like(new_state, state)

    return GradientTransformationExtraArgs(init_fn, update_fn)


def value_and_grad_from_state(value_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``value_and_grad(value_fn)`` that returns the value and gradient a line search
    stored in the optimizer state when they are finite (saving one evaluation per
    step), and computes them otherwise (the first step).

    Returns:
      ``f(params, *args, state, **kwargs) -> (value, grad)``.
    """

    def _vg(params, *fn_args, state, **fn_kwargs):
        value = _tree.get(state, "value")
        grad = _tree.get(state, "grad")
        if value is None or grad is None:
            raise ValueError("Value or gradient not found in the state. Make sure that these values are stored in "
                             "the state by the optimizer.")
        return lax.cond(jnp.logical_not(jnp.isinf(value)) & jnp.logical_not(jnp.isnan(value)),
                        lambda *_: (value, grad),
                        lambda p, a, kwa: _value_and_grad(value_fn)(p, *a, **kwa),
                        params, fn_args, fn_kwargs)

    return _vg


# ---------------------------------------------------------------------------------
# L-BFGS
# ---------------------------------------------------------------------------------
class ScaleByLBFGSState(NamedTuple):
    """L-BFGS' state: the step count, the last params and updates, and the memories
    of their differences (stacked on a leading axis of size ``memory_size``) with
    their weights ``1 / <dw, du>``."""
    count: Any
    params: Any
    updates: Any
    diff_params_memory: Any
    diff_updates_memory: Any
    weights_memory: Any


def _precondition_by_lbfgs(updates, diff_params_memory, diff_updates_memory, weights_memory, identity_scale,
                           memory_idx):
    """The two-loop recursion (Nocedal & Wright, Algorithm 7.4): ``P_k u``."""
    rhos = weights_memory
    memory_size = weights_memory.shape[0]
    indices = (memory_idx + jnp.arange(memory_size)) % memory_size

    def right_product(vec, idx):
        dwi, dui = _tu.tree_map(lambda x: x[idx], (diff_params_memory, diff_updates_memory))
        alpha = rhos[idx] * _tree.vdot(dwi, vec)
        return tree_cast_like(_tree.add_scale(vec, -alpha, dui), vec), alpha

    precond_updates, alphas = lax.scan(right_product, updates, indices, reverse=True)
    precond_updates = _tree.scale(identity_scale, precond_updates)

    def left_product(vec, idx_alpha):
        idx, alpha = idx_alpha
        dwi, dui = _tu.tree_map(lambda x: x[idx], (diff_params_memory, diff_updates_memory))
        beta = rhos[idx] * _tree.vdot(dui, vec)
        return tree_cast_like(_tree.add_scale(vec, alpha - beta, dwi), vec), beta

    precond_updates, _ = lax.scan(left_product, precond_updates, (indices, alphas))
    return precond_updates


def scale_by_lbfgs(memory_size: int = 10, scale_init_precond: bool = True) -> GradientTransformation:
    """Multiplies the updates by L-BFGS' inverse-Hessian approximation built from the
    last ``memory_size`` parameter and gradient differences (Liu & Nocedal 1989).

    Args:
      memory_size: differences kept.
      scale_init_precond: start from ``gamma I`` with ``gamma = <dw, du> / <du, du>``
        (on the first step, ``min(1, 1 / ||u||)``); otherwise from ``I``.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByLBFGSState(count, params,
      updates, diff_params_memory, diff_updates_memory, weights_memory)``.
    """
    if memory_size < 1:
        raise ValueError("memory_size must be >= 1")

    def init_fn(params):
        stacked_zero_params = _tu.tree_map(lambda leaf: jnp.zeros((memory_size,) + tuple(jnp.shape(leaf)),
                                                                  jnp.asarray(leaf).dtype), params)
        return ScaleByLBFGSState(count=jnp.asarray(0, jnp.int32), params=_tree.zeros_like(params),
                                 updates=_tree.zeros_like(params), diff_params_memory=stacked_zero_params,
                                 diff_updates_memory=stacked_zero_params, weights_memory=jnp.zeros(memory_size))

    def update_fn(updates, state, params):
        memory_idx = state.count % memory_size
        prev_memory_idx = (state.count - 1) % memory_size
        diff_params = _tree.sub(params, state.params)
        diff_updates = _tree.sub(updates, state.updates)
        vdot_diff = _tree.vdot(diff_updates, diff_params)
        weight = jnp.where(vdot_diff == 0.0, 0.0, 1.0 / vdot_diff)
        diff_params, diff_updates, weight = _tu.tree_map(lambda x: jnp.where(state.count > 0, x, jnp.zeros_like(x)),
                                                         (diff_params, diff_updates, weight))
        diff_params_memory, diff_updates_memory, weights_memory = _tu.tree_map(
            lambda x, y: x.at[prev_memory_idx].set(y),
            (state.diff_params_memory, state.diff_updates_memory, state.weights_memory),
            (diff_params, diff_updates, weight))
        if scale_init_precond:
            numerator = _tree.vdot(diff_updates, diff_params)
            denominator = _tree.norm(diff_updates, squared=True)
            identity_scale = jnp.where(denominator > 0.0, numerator / denominator, 1.0)
            update_norm = _tree.norm(_tu.tree_map(lax.stop_gradient, updates))
            capped_inv_norm = jnp.minimum(1.0, 1.0 / update_norm)
            identity_scale = jnp.where(state.count > 0, identity_scale, capped_inv_norm)
        else:
            identity_scale = 1.0
        precond_updates = _precondition_by_lbfgs(updates, diff_params_memory, diff_updates_memory, weights_memory,
                                                 identity_scale, memory_idx)
        return precond_updates, ScaleByLBFGSState(count=safe_increment(state.count), params=params, updates=updates,
                                                  diff_params_memory=diff_params_memory,
                                                  diff_updates_memory=diff_updates_memory,
                                                  weights_memory=weights_memory)

    return GradientTransformation(init_fn, update_fn)

