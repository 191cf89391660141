"""Recurrent layers (flax.linen.recurrent): the cells ``LSTMCell``, ``OptimizedLSTMCell``,
``GRUCell``, ``MGUCell``, ``SimpleCell``, ``ConvLSTMCell``, and ``RNN`` / ``Bidirectional``
that run a cell over a sequence.

A cell maps ``(carry, x_t) -> (carry, y_t)`` for one time step; ``cell.initialize_carry(key,
x_t.shape)`` builds the first carry. Parameter names, shapes, initializers and their
order are Flax's (an LSTM's input kernels ``ii, if, ig, io`` and recurrent ``hi, hf, hg,
ho``, the recurrent kernels orthogonal), so the same key initialises the same tree:

    lstm = nn.RNN(nn.LSTMCell(64))                        # params {'cell': {'ii': ..., 'hi': ...}}
    y = lstm.apply(variables, x)                          # x (batch, time, features)
    carry, y = lstm.apply(variables, x, seq_lengths=lengths, return_carry=True)

``RNN`` is ``nn.scan`` over the time axis with the cell's parameters broadcast (one copy
shared by every step) and the 'params' rng not split, exactly Flax's lifted scan; with
``seq_lengths`` the carry returned is each sequence's last valid one, and ``reverse``
flips each sequence within its length (padding stays at the end).
"""
import functools
import logging
from typing import Any, Callable, Optional

import numpy as np

from .. import numpy as jnp
from .. import random
from .. import tree_util
from . import initializers
from . import transforms
from .activations import sigmoid, tanh
from .frozen_dict import FrozenDict
from .linear import Conv, Dense, default_kernel_init, promote_dtype
from .module import Module, compact, nowrap

__all__ = ["RNNCellBase", "LSTMCell", "OptimizedLSTMCell", "GRUCell", "MGUCell", "SimpleCell", "ConvLSTMCell",
           "RNN", "Bidirectional", "flip_sequences"]

_log = logging.getLogger(__name__)


class RNNCellBase(Module):
    """Base class of the cells: ``__call__(carry, inputs) -> (carry, outputs)``."""

    @nowrap
    def initialize_carry(self, rng, input_shape):
        """The first carry for inputs of shape `input_shape` (one time step)."""
        raise NotImplementedError

    @property
    def num_feature_axes(self) -> int:
        """How many trailing axes of an input step are features (1; a ConvLSTM's spatial axes too)."""
        raise NotImplementedError


class _VectorCell(RNNCellBase):
    """The cells whose carry is ``h`` (or, ``_carry_pair``, ``(c, h)``) of shape
    ``(*batch, features)`` and whose products are Dense layers sharing the cell's dtypes."""
    _carry_pair = False

    @nowrap
    def _dense(self, features, kernel_init, **kw):
        return functools.partial(Dense, features=features, kernel_init=kernel_init, dtype=self.dtype,
                                 param_dtype=self.param_dtype, **kw)

    @nowrap
    def initialize_carry(self, rng, input_shape):
        mem_shape = tuple(input_shape[:-1]) + (self.features,)
        if self._carry_pair:
            return _zeros_or_init_pair(self, rng, mem_shape)
        return self.carry_init(rng, mem_shape, self.param_dtype)

    @property
    def num_feature_axes(self) -> int:
        return 1


def _zeros_or_init_pair(cell, rng, mem_shape):
    key1, key2 = random.split(rng)
    return cell.carry_init(key1, mem_shape, cell.param_dtype), cell.carry_init(key2, mem_shape, cell.param_dtype)


class LSTMCell(_VectorCell):
    r"""Long short-term memory cell.

        i = gate(W_ii x + W_hi h + b_hi)      f = gate(W_if x + W_hf h + b_hf)
        g = act(W_ig x + W_hg h + b_hg)       o = gate(W_io x + W_ho h + b_ho)
        c' = f * c + i * g                    h' = o * act(c')

    Attributes:
      features: number of output features (the size of c and h).
      gate_fn: gate activation (default sigmoid); activation_fn: default tanh.
      kernel_init: input kernels' initializer (default lecun_normal()).
      recurrent_kernel_init: recurrent kernels' initializer (default orthogonal()).
      bias_init: initializer of the biases (on the recurrent Dense layers; default zeros).
      dtype, param_dtype: as in Dense.
      carry_init: initializer of c and h (default zeros).

    Carry: ``(c, h)``. Params: ``ii, if, ig, io`` (kernel) and ``hi, hf, hg, ho`` (kernel, bias).
    """
    _carry_pair = True
    features: int
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Any = default_kernel_init
    recurrent_kernel_init: Any = initializers.orthogonal()
    bias_init: Any = initializers.zeros_init()
    dtype: Any = None
    param_dtype: Any = jnp.float32
    carry_init: Any = initializers.zeros_init()

    @compact
    def __call__(self, carry, inputs):
        c, h = carry
        hidden_features = h.shape[-1]
        # input and recurrent layers are summed, so only one of them needs a bias
        dense_h = self._dense(hidden_features, self.recurrent_kernel_init, use_bias=True, bias_init=self.bias_init)
        dense_i = self._dense(hidden_features, self.kernel_init, use_bias=False)
        i = self.gate_fn(dense_i(name="ii")(inputs) + dense_h(name="hi")(h))
        f = self.gate_fn(dense_i(name="if")(inputs) + dense_h(name="hf")(h))
        g = self.activation_fn(dense_i(name="ig")(inputs) + dense_h(name="hg")(h))
        o = self.gate_fn(dense_i(name="io")(inputs) + dense_h(name="ho")(h))
        new_c = f * c + i * g
        new_h = o * self.activation_fn(new_c)
        return (new_c, new_h), new_h


class DenseParams(Module):
    """The parameters of a ``Dense`` layer (same names, shapes and init), without applying it."""
    features: int
    use_bias: bool = True
    param_dtype: Any = jnp.float32
    precision: Any = None
    kernel_init: Any = default_kernel_init
    bias_init: Any = initializers.zeros_init()

    @compact
    def __call__(self, inputs):
        k = self.param("kernel", self.kernel_init, (inputs.shape[-1], self.features), self.param_dtype)
        b = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        return k, b


class OptimizedLSTMCell(_VectorCell):
    """``LSTMCell`` with the four gates' kernels concatenated into one matmul each for the
    input and the recurrent state; parameters are ``LSTMCell``'s (interchangeable).

    Attributes: as :class:`LSTMCell`.
    """
    _carry_pair = True
    features: int
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Any = default_kernel_init
    recurrent_kernel_init: Any = initializers.orthogonal()
    bias_init: Any = initializers.zeros_init()
    dtype: Any = None
    param_dtype: Any = jnp.float32
    carry_init: Any = initializers.zeros_init()

    @compact
    def __call__(self, carry, inputs):
        c, h = carry
        hidden_features = h.shape[-1]

        def concat_dense(x, params, use_bias):
            # one (in, 4 * hidden) product, then split back into the gates
            kernels = [k for k, _ in params.values()]
            kernel = jnp.concatenate(kernels, axis=-1)
            bias = jnp.concatenate([b for _, b in params.values()], axis=-1) if use_bias else None
            x, kernel, bias = promote_dtype(x, kernel, bias, dtype=self.dtype)
            y = jnp.dot(x, kernel)
            if bias is not None:
                y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
            ys = jnp.split(y, np.cumsum([k.shape[-1] for k in kernels[:-1]]), axis=-1)
            return dict(zip(params.keys(), ys))

        dense_params_h, dense_params_i = {}, {}
        for component in ["i", "f", "g", "o"]:
            dense_params_i[component] = DenseParams(features=hidden_features, use_bias=False,
                                                    param_dtype=self.param_dtype, kernel_init=self.kernel_init,
                                                    bias_init=self.bias_init, name=f"i{component}")(inputs)
            dense_params_h[component] = DenseParams(features=hidden_features, use_bias=True,
                                                    param_dtype=self.param_dtype,
                                                    kernel_init=self.recurrent_kernel_init,
                                                    bias_init=self.bias_init, name=f"h{component}")(h)
        dense_h = concat_dense(h, dense_params_h, use_bias=True)
        dense_i = concat_dense(inputs, dense_params_i, use_bias=False)
        i = self.gate_fn(dense_h["i"] + dense_i["i"])
        f = self.gate_fn(dense_h["f"] + dense_i["f"])
        g = self.activation_fn(dense_h["g"] + dense_i["g"])
        o = self.gate_fn(dense_h["o"] + dense_i["o"])
        new_c = f * c + i * g
        new_h = o * self.activation_fn(new_c)
        return (new_c, new_h), new_h


class SimpleCell(_VectorCell):
    """Elman cell: ``h' = act(W_i x + b_i + W_h h)`` (``+ h`` inside act with ``residual``).

    Attributes: features, activation_fn (tanh), kernel_init, recurrent_kernel_init
    (orthogonal), bias_init, dtype, param_dtype, carry_init, residual (default False).

    Carry: ``h``. Params: ``i`` (kernel, bias), ``h`` (kernel).
    """
    features: int
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Any = default_kernel_init
    recurrent_kernel_init: Any = initializers.orthogonal()
    bias_init: Any = initializers.zeros_init()
    dtype: Any = None
    param_dtype: Any = jnp.float32
    carry_init: Any = initializers.zeros_init()
    residual: bool = False

    @compact
    def __call__(self, carry, inputs):
        hidden_features = carry.shape[-1]
        dense_h = self._dense(hidden_features, self.recurrent_kernel_init, use_bias=False)
        dense_i = self._dense(hidden_features, self.kernel_init, use_bias=True, bias_init=self.bias_init)
        new_carry = dense_i(name="i")(inputs) + dense_h(name="h")(carry)
        if self.residual:
            new_carry += carry
        new_carry = self.activation_fn(new_carry)
        return new_carry, new_carry


class GRUCell(_VectorCell):
    """Gated recurrent unit.

        r = gate(W_ir x + b_ir + W_hr h)      z = gate(W_iz x + b_iz + W_hz h)
        n = act(W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h

    Attributes: as :class:`LSTMCell`. Carry: ``h``. Params: ``ir, iz, in`` (kernel,
    bias), ``hr, hz`` (kernel), ``hn`` (kernel, bias).
    """
    features: int
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Any = default_kernel_init
    recurrent_kernel_init: Any = initializers.orthogonal()
    bias_init: Any = initializers.zeros_init()
    dtype: Any = None
    param_dtype: Any = jnp.float32
    carry_init: Any = initializers.zeros_init()

    @compact
    def __call__(self, carry, inputs):
        h = carry
        hidden_features = h.shape[-1]
        dense_h = self._dense(hidden_features, self.recurrent_kernel_init, use_bias=False, bias_init=self.bias_init)
        dense_i = self._dense(hidden_features, self.kernel_init, use_bias=True, bias_init=self.bias_init)
        r = self.gate_fn(dense_i(name="ir")(inputs) + dense_h(name="hr")(h))
        z = self.gate_fn(dense_i(name="iz")(inputs) + dense_h(name="hz")(h))
        # the recurrent term is gated, so it carries its own bias
        n = self.activation_fn(dense_i(name="in")(inputs) + r * dense_h(name="hn", use_bias=True)(h))
        new_h = (1.0 - z) * n + z * h
        return new_h, new_h


class MGUCell(_VectorCell):
    """Minimal gated unit (https://arxiv.org/abs/1603.09420).

        f = gate(W_if x + b_if + W_hf h)
        n = act(W_in x + b_in + f * (W_hn h + b_hn))      (without ``reset_gate``: + W_hn h)
        h' = (1 - f) * n + f * h

    Attributes: features, gate_fn, activation_fn, kernel_init, recurrent_kernel_init,
    forget_bias_init (default ones), activation_bias_init (default zeros), dtype,
    param_dtype, carry_init, reset_gate (default True).

    Carry: ``h``. Params: ``if, in`` (kernel, bias), ``hf`` (kernel), ``hn`` (kernel, and a
    bias with ``reset_gate``).
    """
    features: int
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Any = default_kernel_init
    recurrent_kernel_init: Any = initializers.orthogonal()
    forget_bias_init: Any = initializers.ones_init()
    activation_bias_init: Any = initializers.zeros_init()
    dtype: Any = None
    param_dtype: Any = jnp.float32
    carry_init: Any = initializers.zeros_init()
    reset_gate: bool = True

    @compact
    def __call__(self, carry, inputs):
        h = carry
        hidden_features = h.shape[-1]
        dense_h = self._dense(hidden_features, self.recurrent_kernel_init, use_bias=False,
                              bias_init=self.activation_bias_init)
        dense_i = self._dense(hidden_features, self.kernel_init, use_bias=True)
        f = self.gate_fn(dense_i(name="if", bias_init=self.forget_bias_init)(inputs) + dense_h(name="hf")(h))
        x = dense_h(name="hn", use_bias=self.reset_gate)(h)
        if self.reset_gate:
            x *= f
        n = self.activation_fn(dense_i(name="in", bias_init=self.activation_bias_init)(inputs) + x)
        new_h = (1.0 - f) * n + f * h
        return new_h, new_h


class ConvLSTMCell(RNNCellBase):
    """Convolutional LSTM (Shi et al. 2015): the LSTM's products are convolutions over the
    step's spatial axes; 1.0 is added to the forget gate's pre-activation.

    Attributes:
      features: number of convolution filters (channels of c and h).
      kernel_size: the kernel's spatial shape.
      strides, padding (default 'SAME'), use_bias, dtype, param_dtype: as in Conv.
      carry_init: initializer of c and h (default zeros).

    Inputs ``(*batch, *spatial, channels)``. Carry: ``(c, h)``. Params: ``ih``, ``hh``
    (Conv with ``4 * features`` filters, gates in the order i, g, f, o).
    """
    features: int
    kernel_size: Any
    strides: Any = None
    padding: Any = "SAME"
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    carry_init: Any = initializers.zeros_init()

    @compact
    def __call__(self, carry, inputs):
        c, h = carry
        conv = functools.partial(Conv, features=4 * self.features, kernel_size=self.kernel_size,
                                 strides=self.strides, padding=self.padding, use_bias=self.use_bias,
                                 dtype=self.dtype, param_dtype=self.param_dtype)
        gates = conv(name="ih")(inputs) + conv(name="hh")(h)
        i, g, f, o = jnp.split(gates, 4, axis=-1)
        f = sigmoid(f + 1)
        new_c = f * c + sigmoid(i) * jnp.tanh(g)
        new_h = sigmoid(o) * jnp.tanh(new_c)
        return (new_c, new_h), new_h

    @nowrap
    def initialize_carry(self, rng, input_shape):
        input_shape = tuple(input_shape)
        signal_dims = input_shape[-self.num_feature_axes:-1]
        batch_dims = input_shape[:-self.num_feature_axes]
        return _zeros_or_init_pair(self, rng, batch_dims + signal_dims + (self.features,))

    @property
    def num_feature_axes(self) -> int:
        return len(self.kernel_size) + 1


# =====================================================================================
# RNN over a sequence
# =====================================================================================
def flip_sequences(inputs, seq_lengths, num_batch_dims, time_major):
    """`inputs` reversed along time, each sequence within its own length when
    `seq_lengths` is given (padding stays at the end): lengths [1, 2, 3] turn rows
    [[1,0,0],[2,3,0],[4,5,6]] into [[1,0,0],[3,2,0],[6,5,4]]."""
    time_axis = 0 if time_major else num_batch_dims
    max_steps = inputs.shape[time_axis]
    if seq_lengths is None:
        return jnp.flip(inputs, axis=time_axis)
    seq_lengths = jnp.expand_dims(jnp.asarray(seq_lengths), axis=time_axis)
    idxs = jnp.arange(max_steps - 1, -1, -1)
    if time_major:
        idxs = jnp.reshape(idxs, [max_steps] + [1] * num_batch_dims)
    else:
        idxs = jnp.reshape(idxs, [1] * num_batch_dims + [max_steps])
    idxs = (idxs + seq_lengths) % max_steps
    idxs = jnp.reshape(idxs, list(idxs.shape) + [1] * (inputs.ndim - idxs.ndim))
    return jnp.take_along_axis(inputs, idxs, axis=time_axis)


def _select_last_carry(sequence, seq_lengths):
    """Each sequence's carry at its last valid step, from the (time, batch, ...) history."""
    last_idx = jnp.asarray(seq_lengths) - 1
    return tree_util.tree_map(lambda x: x[last_idx, jnp.arange(x.shape[1])], sequence)


def _concatenate(a, b):
    return jnp.concatenate([a, b], axis=-1)


class RNN(Module):
    """Runs ``cell`` over the time axis of the inputs (``nn.scan`` of the cell).

    Attributes:
      cell: an :class:`RNNCellBase` instance.
      time_major: inputs ``(time, *batch, *features)`` if True, else (default)
        ``(*batch, time, *features)``.
      return_carry: return ``(final carry, outputs)`` instead of the outputs.
      reverse: process the sequence right to left (outputs in that order unless
        ``keep_order``); with ``seq_lengths`` each sequence is reversed within its length.
      keep_order: with ``reverse``, flip the outputs back to the input order.
      unroll, variable_axes, variable_broadcast ('params'), variable_carry, split_rngs
        ({'params': False}): passed to ``nn.scan``.

    Each can be overridden per call; ``initial_carry`` (default the cell's
    ``initialize_carry(init_key or random.key(0), step shape)``) and ``seq_lengths``
    (``(*batch,)`` ints: the carry returned is each sequence's last valid one; outputs
    past a sequence's end are not zeroed) are call arguments.
    """
    cell: Any
    time_major: bool = False
    return_carry: bool = False
    reverse: bool = False
    keep_order: bool = False
    unroll: int = 1
    variable_axes: Any = FrozenDict()
    variable_broadcast: Any = "params"
    variable_carry: Any = False
    split_rngs: Any = FrozenDict({"params": False})

    def __call__(self, inputs, *, initial_carry=None, init_key=None, seq_lengths=None, return_carry=None,
                 time_major=None, reverse=None, keep_order=None):
        return_carry = self.return_carry if return_carry is None else return_carry
        time_major = self.time_major if time_major is None else time_major
        reverse = self.reverse if reverse is None else reverse
        keep_order = self.keep_order if keep_order is None else keep_order

        # the number of batch axes follows from the cell's feature axes (a ConvLSTM has spatial ones)
        time_axis = 0 if time_major else inputs.ndim - (self.cell.num_feature_axes + 1)
        if time_axis < 0:
            time_axis += inputs.ndim
        batch_dims = inputs.shape[1:-self.cell.num_feature_axes] if time_major else inputs.shape[:time_axis]

        if reverse:
            inputs = tree_util.tree_map(
                lambda x: flip_sequences(x, seq_lengths, num_batch_dims=len(batch_dims), time_major=time_major),
                inputs)
        if initial_carry is None:
            if init_key is None:
                init_key = random.key(0)
            input_shape = tuple(inputs.shape[:time_axis]) + tuple(inputs.shape[time_axis + 1:])
            carry = self.cell.initialize_carry(init_key, input_shape)
        else:
            carry = initial_carry

        # with seq_lengths the carry history is kept to pick each sequence's last one
        slice_carry = seq_lengths is not None and return_carry

        def scan_fn(cell, carry, x):
            carry, y = cell(carry, x)
            return (carry, (carry, y)) if slice_carry else (carry, y)

        scan = transforms.scan(scan_fn, in_axes=time_axis, out_axes=(0, time_axis) if slice_carry else time_axis,
                               unroll=self.unroll, variable_axes=self.variable_axes,
                               variable_broadcast=self.variable_broadcast, variable_carry=self.variable_carry,
                               split_rngs=self.split_rngs)
        scan_output = scan(self.cell, carry, inputs)
        if slice_carry:
            _, (carries, outputs) = scan_output
            carry = _select_last_carry(carries, seq_lengths)
        else:
            carry, outputs = scan_output

        if reverse and keep_order:
            outputs = tree_util.tree_map(
                lambda x: flip_sequences(x, seq_lengths, num_batch_dims=len(batch_dims), time_major=time_major),
                outputs)
        return (carry, outputs) if return_carry else outputs


class Bidirectional(Module):
    """Runs ``forward_rnn`` left to right and ``backward_rnn`` right to left (outputs
    flipped back to the input order) and merges their outputs with ``merge_fn``
    (default: concatenated features). The carry is ``(forward carry, backward carry)``;
    ``init_key`` is split between the two.
    """
    forward_rnn: Any
    backward_rnn: Any
    merge_fn: Callable[[Any, Any], Any] = _concatenate
    time_major: bool = False
    return_carry: bool = False

    def __call__(self, inputs, *, initial_carry=None, init_key=None, seq_lengths=None, return_carry=None,
                 time_major=None, reverse=None, keep_order=None):
        time_major = self.time_major if time_major is None else time_major
        return_carry = self.return_carry if return_carry is None else return_carry
        if init_key is not None:
            key_forward, key_backward = random.split(init_key)
        else:
            key_forward = key_backward = None
        if initial_carry is not None:
            initial_carry_forward, initial_carry_backward = initial_carry
        else:
            initial_carry_forward = initial_carry_backward = None
        if self.forward_rnn is self.backward_rnn:
            _log.warning("forward_rnn and backward_rnn is the same object, so they will share parameters.")

        carry_forward, outputs_forward = self.forward_rnn(
            inputs, initial_carry=initial_carry_forward, init_key=key_forward, seq_lengths=seq_lengths,
            return_carry=True, time_major=time_major, reverse=False)
        carry_backward, outputs_backward = self.backward_rnn(
            inputs, initial_carry=initial_carry_backward, init_key=key_backward, seq_lengths=seq_lengths,
            return_carry=True, time_major=time_major, reverse=True, keep_order=True)
        carry = (carry_forward, carry_backward)
        outputs = tree_util.tree_map(self.merge_fn, outputs_forward, outputs_backward)
        return (carry, outputs) if return_carry else outputs
