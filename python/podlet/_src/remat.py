"""jax.checkpoint / jax.remat, jax.checkpoint_policies and checkpoint_name.

The function is traced once into a sub-graph held by one `checkpoint` node
(cpp/podlet/prims/remat.cc). Its VJP rule splits the sub-graph's reverse mode by the
policy: the forward pass keeps only what the policy saves (plus the inputs), the
backward pass recomputes the rest. podlet has no common-subexpression pass that could
merge the recomputation back into the forward pass, so ``prevent_cse`` is accepted and
always in effect.
"""
import functools
import types

from .. import tree_util
from .core import _Traced, _abstractify_all, bind


class _Policy:
    """A named checkpoint policy (what the backward pass may read instead of recomputing)."""
    __slots__ = ("kinds", "names")

    def __init__(self, kinds, names=()):
        self.kinds = tuple(kinds)
        self.names = tuple(names)

    def __repr__(self):
        return f"checkpoint_policy({'|'.join(self.kinds)}{', names=' + repr(self.names) if self.names else ''})"

    def __call__(self, *args, **kwargs):
        raise TypeError("podlet checkpoint policies are declarative: pass them as policy=..., they are not "
                        "called per primitive")


def _names_policy(kind):
    def make(*names):
        for n in names:
            if not isinstance(n, str):
                raise TypeError(f"checkpoint policy names must be strings, got {n!r}")
        return _Policy((kind,), names)
    return make


def save_from_both_policies(policy_1, policy_2):
    for p in (policy_1, policy_2):
        if not isinstance(p, _Policy):
            raise TypeError(f"save_from_both_policies expects checkpoint_policies, got {p!r}")
    if policy_1.names and policy_2.names and policy_1.names != policy_2.names:
        raise NotImplementedError("save_from_both_policies of two name-based policies with different names")
    return _Policy(policy_1.kinds + policy_2.kinds, policy_1.names or policy_2.names)


checkpoint_policies = types.SimpleNamespace(
    nothing_saveable=_Policy(("nothing",)),
    everything_saveable=_Policy(("everything",)),
    dots_saveable=_Policy(("dots",)),
    checkpoint_dots=_Policy(("dots",)),
    dots_with_no_batch_dims_saveable=_Policy(("dots_no_batch",)),
    checkpoint_dots_with_no_batch_dims=_Policy(("dots_no_batch",)),
    save_anything_except_these_names=_names_policy("names_except"),
    save_only_these_names=_names_policy("names_only"),
    save_any_names_but_these=_names_policy("names_but"),
    save_from_both_policies=save_from_both_policies,
)


def checkpoint_name(x, name):
    """Names x (a pytree of arrays) for the name-based checkpoint policies."""
    if not isinstance(name, str):
        raise TypeError(f"checkpoint_name: name must be a string, got {name!r}")
    return tree_util.tree_map(lambda v: bind("checkpoint_name", v, name=name), x)


def checkpoint(fun=None, *, prevent_cse=True, policy=None, static_argnums=()):
    """jax.checkpoint: fun's intermediates are recomputed in the backward pass instead of
    kept, except what `policy` (a jax.checkpoint_policies entry) saves."""
    if fun is None:
        return functools.partial(checkpoint, prevent_cse=prevent_cse, policy=policy, static_argnums=static_argnums)
    if policy is None:
        policy = checkpoint_policies.nothing_saveable
    if not isinstance(policy, _Policy):
        raise TypeError(f"checkpoint policy must be one of podlet.checkpoint_policies (got {policy!r}); "
                        "arbitrary Python policy callables are not supported")
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    static_argnums = tuple(static_argnums)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        n = len(args)
        static = {i % n for i in static_argnums if -n <= i < n}
        dyn = tuple(None if i in static else a for i, a in enumerate(args))
        leaves, in_tree = tree_util.tree_flatten((dyn, kwargs))
        conv, sig = _abstractify_all(leaves)

        def body(dargs, dkw):
            full = [args[i] if i in static else a for i, a in enumerate(dargs)]
            return fun(*full, **dkw)

        if policy.kinds == ("everything",):  # saving everything is no checkpoint at all
            return fun(*args, **kwargs)
        entry = _Traced(body, sig, in_tree)
        g = entry.graph
        g.outputs = entry.out_vids
        outs = bind("checkpoint", *conv, *entry.captures, body=g, policy="|".join(policy.kinds),
                    names="\n".join(policy.names))
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        for o, w in zip(outs, entry.out_weak):
            if w:
                o.weak_type = True
        return tree_util.tree_unflatten(entry.out_tree, outs)

    return wrapped


remat = checkpoint
