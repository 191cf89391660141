"""A tf.data-like input pipeline running in C++ (TBB workers, a prefetch thread).

    ds = (podlet.data.Dataset(podlet.data.synthetic_ddsm("train"))
          .shuffle(8192, seed=0)
          .normalize("mean_std", mean=0.5, std=0.25)
          .augment(**podlet.data.CONSERVATIVE_AUGMENTATION, seed=0)
          .repeat()
          .batch(256, drop_remainder=True)
          .prefetch(4)
          .per_device(8))
    # one process of P: .batch(256, drop_remainder=True).shard_batches(P, p).per_device(8)
    for batch in ds: ...   # {"image": float32 (8, 32, 224, 224, 1), "label": int32 (8, 32), "id": str (8, 32)}

Semantics follow tf.data where the names overlap:

* ``shuffle(buffer_size)`` is a buffer shuffle (see ``cpp/podlet/data/shuffle.h``): an
  element can only move ahead by less than ``buffer_size`` places, ``buffer_size=1`` keeps
  the order, ``buffer_size >= len(source)`` is a full uniform permutation. With
  ``reshuffle_each_iteration`` every epoch (each repetition, and each new iterator) has a
  new order; without it every epoch repeats epoch 0's order.
* ``repeat().batch()`` makes batches that span epoch boundaries; ``batch().repeat()``
  batches each epoch separately (its last batch short unless ``drop_remainder``).
* Element maps run in the order they are written. Pixels always become
  ``float32(uint8) / 255`` first; ``normalize`` then applies the seed's ``mean_std`` or
  ``minus_one_to_one`` (without it, images stay in [0, 1]). ``augment`` is the seed's
  conservative recipe (hflip, roll, rotate, brightness, contrast, in that order; no
  clipping; see ``cpp/podlet/data/augment.h``). The seed normalises, then augments.

Determinism: the same seeds give the same batches, bit for bit, whatever the number of
worker threads. Randomness is counter-based, keyed by (seed, epoch, position in the
epoch), so ``iterator(start_step=k)`` starts at batch k directly (resume) and sees the
batches the uninterrupted run saw.
"""
from __future__ import annotations

import atexit
import dataclasses
import numbers
import weakref
from typing import Any

import numpy as np

from .. import _core

AUTOTUNE = -1
#: ``prefetch(AUTOTUNE)`` keeps this many batches ready.
AUTOTUNE_PREFETCH = 2

#: The seed's "conservative" augmentation (translate 6 px, rotate 10 degrees, brightness
#: 0.05, mild contrast; no flip: mammograms carry left/right information).
CONSERVATIVE_AUGMENTATION = dict(translate=6, rotate=10.0, brightness=0.05, contrast=(0.9, 1.1))
#: The seed's "weak" recipe: smaller geometry, no photometric jitter.
WEAK_AUGMENTATION = dict(translate=4, rotate=8.0, brightness=0.0, contrast=None)

_INFINITE = -1


def _int(name, v, lo=None):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {v!r}")
    v = int(v)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    return v


def _float(name, v, lo=None):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a number, got {v!r}")
    v = float(v)
    if not np.isfinite(v) or (lo is not None and v < lo):
        raise ValueError(f"{name} must be a finite number >= {lo}, got {v}")
    return v


def _seed(name, v):
    v = _int(name, v, 0)
    if v >= 2**64:
        raise ValueError(f"{name} must be below 2**64, got {v}")
    return v


@dataclasses.dataclass(frozen=True)
class _Stage:
    kind: str
    args: dict


class Dataset:
    """A pipeline over a source. Methods return new datasets (the receiver is unchanged)."""

    def __init__(self, source, _stages=()):
        if not isinstance(source, _core.DataSource):
            raise TypeError(f"Dataset needs a podlet data source (e.g. podlet.data.synthetic_ddsm(...), "
                            f"podlet.data.array_source(...)), got {type(source).__name__}")
        self.source = source
        self._stages = tuple(_stages)
        self._iterations = 0
        self._spec()  # validate the chain now, so the error points at the call that broke it

    def _with(self, kind, **args):
        return Dataset(self.source, self._stages + (_Stage(kind, args),))

    # ---- tf.data-style stages -------------------------------------------------------------
    def shuffle(self, buffer_size: int, seed: int = 0, reshuffle_each_iteration: bool = True):
        """Buffer shuffle. ``seed`` defaults to 0 (tf.data draws one at random; podlet is
        reproducible by default)."""
        return self._with("shuffle", buffer_size=_int("shuffle buffer_size", buffer_size, 1),
                          seed=_seed("shuffle seed", seed), reshuffle=bool(reshuffle_each_iteration))

    def normalize(self, mode: str = "mean_std", mean=None, std=None):
        """``image/255``, then ``(x - mean) / std`` (``mode="mean_std"``; scalars or one value
        per channel) or ``x * 2 - 1`` (``mode="minus_one_to_one"``)."""
        if mode == "mean_std":
            if mean is None or std is None:
                raise ValueError("normalize('mean_std') needs mean= and std=")
            mean = [_float("normalize mean", m) for m in np.atleast_1d(np.asarray(mean, dtype=object))]
            std = [_float("normalize std", s) for s in np.atleast_1d(np.asarray(std, dtype=object))]
            if any(s <= 0 for s in std):
                raise ValueError(f"normalize std must be > 0, got {std}")
        elif mode == "minus_one_to_one":
            if mean is not None or std is not None:
                raise ValueError("normalize('minus_one_to_one') takes no mean/std")
        else:
            raise ValueError(f"normalize: unknown mode {mode!r}; expected 'mean_std' or 'minus_one_to_one'")
        return self._with("normalize", op="normalize", mode=mode, mean=mean, std=std)

    def augment(self, translate: int = 0, rotate: float = 0.0, brightness: float = 0.0, contrast=None,
                hflip: bool = False, seed: int = 0):
        """The seed's augmentation. ``translate``: roll by uniform integer shifts in
        [-translate, translate] per axis; ``rotate``: bilinear rotation by a uniform angle in
        [-rotate, rotate] degrees (fill 0); ``brightness``: add uniform delta in
        [-brightness, brightness]; ``contrast=(lo, hi)``: ``(x - mean) * f + mean`` per
        channel, f uniform in [lo, hi]; ``hflip``: mirror with probability 1/2 (off by default).
        Use ``podlet.data.CONSERVATIVE_AUGMENTATION`` for the seed's recipe."""
        translate = _int("augment translate", translate, 0)
        rotate = _float("augment rotate", rotate, 0.0)
        if rotate > 180:
            raise ValueError(f"augment rotate is in degrees and must be <= 180, got {rotate}")
        brightness = _float("augment brightness", brightness, 0.0)
        if contrast is not None:
            try:
                lo, hi = contrast
            except (TypeError, ValueError):
                raise TypeError(f"augment contrast must be None or a pair (lo, hi), got {contrast!r}") from None
            lo, hi = _float("augment contrast lo", lo, 0.0), _float("augment contrast hi", hi, 0.0)
            if lo > hi:
                raise ValueError(f"augment contrast needs lo <= hi, got ({lo}, {hi})")
            contrast = (lo, hi)
        return self._with("augment", op="augment", translate=translate, rotate=rotate, brightness=brightness,
                          contrast=contrast, hflip=bool(hflip), seed=_seed("augment seed", seed))

    def batch(self, batch_size: int, drop_remainder: bool = False):
        return self._with("batch", batch_size=_int("batch_size", batch_size, 1), drop_remainder=bool(drop_remainder))

    def repeat(self, count: int | None = None):
        """Repeat ``count`` times (``None`` or -1: forever)."""
        count = _INFINITE if count is None or count == -1 else _int("repeat count", count, 0)
        return self._with("repeat", count=count)

    def take(self, count: int):
        """At most ``count`` output items (batches when batched). Goes after batch/repeat."""
        return self._with("take", count=_int("take count", count, 0))

    def skip(self, count: int):
        """Skip the first ``count`` output items, without computing them (resume)."""
        return self._with("skip", count=_int("skip count", count, 0))

    def prefetch(self, buffer_size: int = AUTOTUNE):
        """Compute up to ``buffer_size`` items ahead on a background thread."""
        if buffer_size != AUTOTUNE:
            _int("prefetch buffer_size", buffer_size, 0)
        return self._with("prefetch", n=AUTOTUNE_PREFETCH if buffer_size == AUTOTUNE else int(buffer_size))

    def shard_batches(self, num_shards: int, index: int):
        """Keep part `index` of `num_shards` equal contiguous parts of every batch: the part
        that process `index` of a multi-process run feeds to its devices (``num_shards =
        podlet.process_count()``, ``index = podlet.process_index()``). The batches are those
        of the unsharded pipeline, element for element and bit for bit (shuffle order and
        augmentation draws are planned on the whole batch), but only this part's elements
        are read, decoded and augmented. tf.data's ``shard`` deals out whole elements
        instead, which changes the global batches. A short last batch (no
        ``drop_remainder``) keeps what falls into the part, possibly nothing."""
        num_shards = _int("shard_batches num_shards", num_shards, 1)
        index = _int("shard_batches index", index, 0)
        if index >= num_shards:
            raise ValueError(f"shard_batches: index {index} is not below num_shards {num_shards}")
        return self._with("shard_batches", n=num_shards, index=index)

    def per_device(self, num_devices: int):
        """Reshape batches to ``(num_devices, batch/num_devices, ...)`` for pmap (the seed's
        per-device iterator). The batch size must divide evenly."""
        return self._with("per_device", n=_int("per_device num_devices", num_devices, 1))

    def with_threads(self, threads: int):
        """Worker threads for this pipeline (default: ``podlet.config.num_threads``)."""
        return self._with("threads", n=_int("threads", threads, 1))

    # ---- planning -------------------------------------------------------------------------
    def _spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = dict(ops=[], repeat=1, batch_size=0, prefetch=0, threads=0)
        seen = set()
        skip = 0
        per_device = None
        for st in self._stages:
            k, a = st.kind, st.args
            if k in ("shuffle", "batch", "repeat", "prefetch", "per_device", "threads", "normalize",
                     "shard_batches") and k in seen:
                raise ValueError(f"{k}() may appear once in a pipeline")
            if k == "shuffle":
                if seen & {"repeat", "batch"}:
                    raise ValueError("shuffle() must come before repeat() and batch() "
                                     "(podlet shuffles each epoch's elements)")
                spec.update(shuffle=True, shuffle_buffer=a["buffer_size"], shuffle_seed=a["seed"],
                            reshuffle_each_iteration=a["reshuffle"])
            elif k in ("normalize", "augment"):
                if "batch" in seen:
                    raise ValueError(f"{k}() works on single examples: call it before batch()")
                spec["ops"].append(dict(a))
            elif k == "batch":
                spec.update(batch_size=a["batch_size"], drop_remainder=a["drop_remainder"],
                            repeat_before_batch="repeat" in seen)
            elif k == "repeat":
                spec["repeat"] = a["count"]
            elif k in ("take", "skip"):
                if "batch" in self._kinds() and "batch" not in seen:
                    raise ValueError(f"{k}() counts output items: call it after batch()")
                if "repeat" in self._kinds() and "repeat" not in seen:
                    raise ValueError(f"{k}() counts output items: call it after repeat()")
                if k == "skip":
                    if "take" in spec:
                        spec["take"] = max(spec["take"] - a["count"], 0)
                    skip += a["count"]
                else:
                    spec["take"] = min(spec.get("take", a["count"]), a["count"])
            elif k == "prefetch":
                spec["prefetch"] = a["n"]
            elif k == "shard_batches":
                if "batch" not in seen:
                    raise ValueError("shard_batches() splits batches: call it after batch()")
                if "per_device" in seen:
                    raise ValueError("shard_batches() must come before per_device() (devices split the "
                                     "process's part)")
                if spec["batch_size"] % a["n"]:
                    raise ValueError(f"shard_batches({a['n']}, {a['index']}): batch size {spec['batch_size']} "
                                     f"is not divisible into {a['n']} equal parts")
                spec.update(shard_count=a["n"], shard_index=a["index"])
            elif k == "per_device":
                if "batch" not in seen:
                    raise ValueError("per_device() reshapes batches: call it after batch()")
                per_device = a["n"]
                local = spec["batch_size"] // spec.get("shard_count", 1)
                if local % per_device:
                    raise ValueError(f"per_device({per_device}): batch size {local} is not "
                                     f"divisible by {per_device} devices")
            elif k == "threads":
                spec["threads"] = a["n"]
            seen.add(k)
        if "take" in spec:
            spec["take"] += skip  # the C++ plan counts take from item 0
        spec["_skip"] = skip
        spec["_per_device"] = per_device
        return spec

    def _kinds(self):
        return {s.kind for s in self._stages}

    def cardinality(self) -> int:
        """Number of items, -1 if infinite (``tf.data.INFINITE_CARDINALITY``)."""
        s = self._spec()
        n = len(self.source)
        B = max(s["batch_size"], 1)
        drop = s["batch_size"] > 0 and s.get("drop_remainder", False)
        R = s["repeat"]
        if s["batch_size"] == 0 or s.get("repeat_before_batch", True):
            items = _INFINITE if R == _INFINITE and n else (R * n // B if drop else -(-R * n // B))
        else:
            per = n // B if drop else -(-n // B)
            items = _INFINITE if R == _INFINITE and per else R * per
        if "take" in s:
            items = s["take"] if items == _INFINITE else min(items, s["take"])
        return items if items == _INFINITE else max(items - s["_skip"], 0)

    def __len__(self):
        n = self.cardinality()
        if n == _INFINITE:
            raise TypeError("the dataset is infinite (repeat()); len() is undefined")
        return n

    def augment_params(self, epoch: int, position: int, op: int = 0) -> dict:
        """Debug hook: the parameters augment op number ``op`` draws for the element at
        ``position`` of ``epoch`` (keys flip, dy, dx, angle_deg, brightness, contrast)."""
        ops = [o for o in self._spec()["ops"] if o["op"] == "augment"]
        if not 0 <= op < len(ops):
            raise ValueError(f"augment op {op} does not exist; the pipeline has {len(ops)}")
        return _core.data_augment_draw(ops[op], op, int(epoch), int(position))

    # ---- iteration ------------------------------------------------------------------------
    def iterator(self, start_step: int = 0, iteration: int | None = None, with_positions: bool = False):
        """An iterator starting at output item ``start_step``.

        ``iteration`` says which pass over this dataset the iterator is (it selects the
        epochs, hence the shuffle order and augmentation draws): by default the number of
        iterators already created from this object, as tf.data reshuffles on each new
        iteration. A resumed run passes the values the interrupted one was at.
        ``with_positions`` adds ``"epoch"``, ``"position"`` and ``"index"`` (which element
        of the source) to each item.
        """
        start_step = _int("start_step", start_step, 0)
        if iteration is None:
            iteration = self._iterations
            self._iterations += 1
        iteration = _int("iteration", iteration, 0)
        spec = self._spec()
        R = spec["repeat"]
        first_epoch = iteration << 32 if R == _INFINITE else iteration * max(R, 1)
        return DatasetIterator(self, spec, first_epoch, spec["_skip"] + start_step, with_positions)

    def __iter__(self):
        return self.iterator()

    def __repr__(self):
        chain = "".join(f".{s.kind}({', '.join(f'{k}={v!r}' for k, v in s.args.items() if k != 'op')})"
                        for s in self._stages)
        return f"Dataset({self.source.describe()}){chain}"


_live_iterators: "weakref.WeakSet[DatasetIterator]" = weakref.WeakSet()


@atexit.register
def _close_all():
    # Stop prefetch threads before the interpreter tears down.
    for it in list(_live_iterators):
        it.close()


class DatasetIterator:
    """Yields dicts of NumPy arrays; ``step`` is the index of the next item (for resume)."""

    def __init__(self, dataset, spec, first_epoch, start_item, with_positions):
        self._batched = spec["batch_size"] > 0
        self._per_device = spec["_per_device"]
        self._with_positions = with_positions
        core_spec = {k: v for k, v in spec.items() if not k.startswith("_")}
        self._it = _core.DataIterator(dataset.source, core_spec, first_epoch, start_item)
        self.step = start_item - spec["_skip"]
        self.first_epoch = first_epoch
        _live_iterators.add(self)

    def __iter__(self):
        return self

    def __next__(self):
        if self._it is None:
            raise StopIteration
        out = self._it.next()
        if out is None:
            self.close()
            raise StopIteration
        self.step += 1
        image, label, ids, epoch, position, index = out
        item = {"image": image, "label": label, "id": np.array(ids, dtype=str)}
        if self._with_positions:
            item.update(epoch=epoch, position=position, index=index)
        if not self._batched:
            return {k: v[0] for k, v in item.items()}
        if self._per_device:
            item = shard_batch(item, self._per_device)
        return item

    def close(self):
        """Stops the prefetch thread; further ``next`` calls end the iteration."""
        it, self._it = self._it, None
        if it is not None:
            it.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def shard_batch(batch, num_devices: int):
    """``(B, ...) -> (num_devices, B // num_devices, ...)`` for every array of a batch dict
    (like ``flax.training.common_utils.shard``)."""
    num_devices = _int("num_devices", num_devices, 1)
    out = {}
    for k, v in batch.items():
        v = np.asarray(v)
        if v.ndim == 0 or v.shape[0] % num_devices:
            raise ValueError(f"shard_batch: {k!r} has shape {v.shape}; its leading (batch) axis must be "
                             f"divisible by {num_devices} devices")
        out[k] = v.reshape((num_devices, v.shape[0] // num_devices) + v.shape[1:])
    return out
