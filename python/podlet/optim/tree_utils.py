"""podlet.optim.tree_utils: optax.tree_utils (0.2.8), the ``tree_*`` spellings of
:mod:`podlet.optim.tree` (optax keeps both; ``optax.tree`` is the current one)."""
from . import tree as _t
from .tree import NamedTupleKey

tree_add, tree_add_scale, tree_allclose, tree_batch_shape = _t.add, _t.add_scale, _t.allclose, _t.batch_shape
tree_bias_correction, tree_cast, tree_cast_like, tree_clip = _t.bias_correction, _t.cast, _t.cast_like, _t.clip
tree_conj, tree_div, tree_dtype, tree_full_like = _t.conj, _t.div, _t.dtype, _t.full_like
tree_get, tree_get_all_with_path, tree_map_params = _t.get, _t.get_all_with_path, _t.map_params
tree_max, tree_min, tree_mul, tree_norm, tree_ones_like = _t.max, _t.min, _t.mul, _t.norm, _t.ones_like
tree_random_like, tree_real, tree_scale, tree_set, tree_size = _t.random_like, _t.real, _t.scale, _t.set, _t.size
tree_split_key_like, tree_sub, tree_sum = _t.split_key_like, _t.sub, _t.sum
tree_unwrap_random_key_data, tree_update_infinity_moment = _t.unwrap_random_key_data, _t.update_infinity_moment
tree_update_moment, tree_update_moment_per_elem_norm = _t.update_moment, _t.update_moment_per_elem_norm
tree_vdot, tree_where, tree_zeros_like = _t.vdot, _t.where, _t.zeros_like

__all__ = ["NamedTupleKey"] + sorted(n for n in dir() if n.startswith("tree_"))
