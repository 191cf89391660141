"""Combining transformations over parts of the parameters: ``partition`` (optax's
``multi_transform``), ``freeze`` and ``selective_transform``
(``optax/transforms/_combining.py``, ``_freezing.py``).

``partition({'adam': adam(1e-3), 'frozen': set_to_zero()}, labels)`` runs each
transformation on the leaves whose label names it, through :func:`masked`; the
state is ``PartitionState(inner_states={label: MaskedState(...)})``, optax's pytree.
Labels are a pytree with the params' structure (or a prefix of it) or a function of
the params returning one; they must be static (Python values) for ``podlet.jit``.
"""
from typing import Any, Callable, Hashable, Mapping, NamedTuple, Union

from .. import tree_util as _tu
from ._base import GradientTransformation, GradientTransformationExtraArgs, set_to_zero, with_extra_args_support
from .transform import masked


class PartitionState(NamedTuple):
    """The inner states of :func:`partition`, one per label."""
    inner_states: Mapping[Hashable, Any]


MultiTransformState = PartitionState  # optax keeps the old name as an alias


def _labels_of(param_labels, tree, what):
    labels = param_labels(tree) if callable(param_labels) else param_labels
    # Check the labels against the tree once, with a message naming the argument
    # (tree_map's own error speaks of prefixes of an anonymous tree).
    try:
        _tu.tree_map(lambda _l, _p: None, labels, tree)
    except ValueError as e:
        raise ValueError(f"partition: `param_labels` must have the structure of the {what} (or be a prefix of "
                         f"it), got labels {_tu.tree_structure(labels)} for {what} "
                         f"{_tu.tree_structure(tree)}.\n{e}") from None
    return labels


def _check_label_set(labels, transforms):
    label_set = set(_tu.tree_leaves(labels))
    if not label_set.issubset(transforms.keys()):
        raise ValueError("Some parameters have no corresponding transformation.\n"
                         f"Parameter labels: {list(sorted(label_set, key=repr))} \n"
                         f"Transforms keys: {list(sorted(transforms.keys(), key=repr))} \n")


def partition(transforms: Mapping[Hashable, GradientTransformation],
              param_labels: Union[Any, Callable[[Any], Any]], *,
              mask_compatible_extra_args: bool = False) -> GradientTransformationExtraArgs:
    """Applies a different transformation to each labelled subset of the params.

    Args:
      transforms: ``{label: transformation}``; each runs on the leaves with its label.
      param_labels: a pytree of labels with the params' structure (or a prefix of
        it), or a function of the params/updates returning one.
      mask_compatible_extra_args: also mask extra args that have the updates'
        structure (see :func:`masked`).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state
      ``PartitionState(inner_states={label: MaskedState(inner_state)})``.

    Raises:
      ValueError: at ``init`` (and ``update``) when a label has no transformation or
        the labels do not match the params' structure.
    """
    transforms = {k: with_extra_args_support(v) for k, v in transforms.items()}

    def make_mask(labels, group):
        return _tu.tree_map(lambda label: label == group, labels)

    def init_fn(params):
        labels = _labels_of(param_labels, params, "params")
        _check_label_set(labels, transforms)
        inner_states = {
            group: masked(tx, make_mask(labels, group),
                          mask_compatible_extra_args=mask_compatible_extra_args).init(params)
            for group, tx in transforms.items()}
        return PartitionState(inner_states)

    def update_fn(updates, state, params=None, **extra_args):
        labels = _labels_of(param_labels, updates, "updates")
        _check_label_set(labels, transforms)
        new_inner_state = {}
        for group, tx in transforms.items():
            masked_tx = masked(tx, make_mask(labels, group), mask_compatible_extra_args=mask_compatible_extra_args)
            updates, new_inner_state[group] = masked_tx.update(updates, state.inner_states[group], params,
                                                               **extra_args)
        return updates, PartitionState(new_inner_state)

    return GradientTransformationExtraArgs(init_fn, update_fn)


multi_transform = partition  # optax's former name, still exported


def freeze(mask) -> GradientTransformation:
    """Zeroes the updates where ``mask`` is True (holds those params constant).

    Args:
      mask: a bool, or a static pytree of bools with the params' structure (or a
        prefix of it); True freezes.

    Returns:
      ``masked(set_to_zero(), mask)``.
    """
    return masked(set_to_zero(), mask)


def selective_transform(optimizer: GradientTransformation, *, freeze_mask) -> GradientTransformation:
    """Runs ``optimizer`` only on the leaves not frozen by ``freeze_mask`` (their
    optimizer state is not even allocated); frozen leaves get zero updates.

    Args:
      optimizer: the transformation for the trainable leaves.
      freeze_mask: a bool or a static pytree of bools; True freezes.

    Returns:
      ``partition({'train': optimizer, 'freeze': set_to_zero()}, labels)``.
    """

    def label_fn(params):
        del params
        return _tu.tree_map(lambda m: "freeze" if m else "train", freeze_mask)

    return partition({"train": optimizer, "freeze": set_to_zero()}, param_labels=label_fn)
