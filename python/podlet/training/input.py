"""The loop's view of a dataset: split sizes, class names, and batch streams.

    data = make_data(cfg)                       # from cfg.data (podlet.data pipelines)
    data.num_examples("train"), data.class_names
    for batch in data.train_batches(batch_size, start_step=s): ...     # endless, resumable
    for batch in data.eval_batches("validation", batch_size): ...      # one pass, padded

Training batches are the seed's stream (shuffle -> normalise -> augment -> repeat ->
batch(drop_remainder) -> prefetch) started at batch ``start_step``: a resumed run sees
exactly the batches the uninterrupted run saw from that step on. Evaluation batches
cover every example once, in order; the last one is padded to the full batch size
(fixed shapes: no retrace) and carries ``mask`` = 0 on the padding, so no example is
dropped (the seed's drop_remainder evaluated 9,728 of the 9,770 test patches).

Multi-process runs (``mpirun``, see ``podlet.training.loop``): ``train_batches`` and
``eval_batches`` take ``num_shards=P, shard_index=p`` and then yield only part p of P
equal contiguous parts of every (global) batch, the part process p feeds to its devices;
the batches are those of the one-process stream, and only this part's elements are read,
decoded and augmented. An evaluation part is padded to ``batch_size // P`` (``mask`` 0).
A dataset object given to ``train(data=...)`` must accept these two arguments to be used
by several processes.

``ArrayData`` serves NumPy arrays held in memory the same way (tests, notebooks).
"""
from __future__ import annotations

import os

import numpy as np

__all__ = ["make_data", "ArrayData", "DataError"]


class DataError(ValueError):
    """A dataset cannot serve what the config asks for."""


def _part(batch_size, num_shards, shard_index):
    """[lo, hi) of part `shard_index` of a batch of `batch_size` cut into `num_shards`."""
    if batch_size % num_shards:
        raise DataError(f"a batch of {batch_size} does not split into {num_shards} equal parts (one a process)")
    if not 0 <= shard_index < num_shards:
        raise DataError(f"shard_index {shard_index} is not below num_shards {num_shards}")
    n = batch_size // num_shards
    return shard_index * n, (shard_index + 1) * n


def _pad(batch, batch_size):
    n = len(batch["label"])
    mask = np.zeros(batch_size, np.float32)
    mask[:n] = 1.0
    if n == batch_size:
        return {**batch, "mask": mask}
    pad = batch_size - n
    return {"image": np.concatenate([batch["image"], np.zeros((pad,) + batch["image"].shape[1:],
                                                              batch["image"].dtype)]),
            "label": np.concatenate([batch["label"], np.zeros(pad, batch["label"].dtype)]),
            "mask": mask}


class ArrayData:
    """Splits given as arrays: ``{"train": (images uint8/float [N,H,W,C], labels [N]), ...}``.

    Images are scaled by 1/255 when integer, then normalised as the config says; the
    training stream shuffles each epoch with a key of (seed, epoch). No augmentation.
    """

    def __init__(self, splits: dict, class_names, *, seed: int = 0, normalization=None):
        self.splits = {k: (np.asarray(x), np.asarray(y, np.int32)) for k, (x, y) in splits.items()}
        self.class_names = list(class_names)
        self.seed = seed
        self.normalization = normalization

    def num_examples(self, split):
        if split not in self.splits:
            raise DataError(f"no split {split!r}; available: {sorted(self.splits)}")
        return len(self.splits[split][1])

    def _norm(self, x):
        x = x.astype(np.float32) / 255.0 if np.issubdtype(x.dtype, np.integer) else x.astype(np.float32)
        n = self.normalization
        if n is None:
            return x
        if n.mode == "minus_one_to_one":
            return x * 2.0 - 1.0
        return (x - np.float32(n.mean)) / np.float32(n.std)

    def train_batches(self, batch_size, start_step=0, split="train", *, num_shards=1, shard_index=0):
        x, y = self.splits[split]
        n = len(y)
        if n < batch_size:
            raise DataError(f"split {split!r} has {n} examples, fewer than one batch of {batch_size}")
        lo, hi = _part(batch_size, num_shards, shard_index)
        # repeat-then-batch, as the seed: batch k takes items [k*B, (k+1)*B) of the endless stream
        item = start_step * batch_size
        orders = {}
        while True:
            idx = np.empty(batch_size, np.int64)
            for j in range(batch_size):
                epoch, pos = divmod(item + j, n)
                if epoch not in orders:
                    orders = {epoch: np.random.default_rng([self.seed, epoch]).permutation(n)}
                idx[j] = orders[epoch][pos]
            item += batch_size
            idx = idx[lo:hi]
            yield {"image": self._norm(x[idx]), "label": y[idx]}

    def eval_batches(self, split, batch_size, *, num_shards=1, shard_index=0):
        x, y = self.splits[split]
        lo, hi = _part(batch_size, num_shards, shard_index)
        for i in range(0, len(y), batch_size):
            part = slice(min(i + lo, len(y)), min(i + hi, len(y)))
            yield _pad({"image": self._norm(x[part]), "label": y[part]}, hi - lo)


class PipelineData:
    """``cfg.data`` served by podlet.data: the synthetic set, a TFDS build or HDF5 shards."""

    def __init__(self, cfg):
        import podlet.data as pdata
        self.pdata = pdata
        self.cfg = cfg
        d = cfg.data
        self.sources = {role: self._source(split) for role, split in d.splits.items()}
        self.class_names = list(self.sources["train"].class_names()) or cfg.class_names
        if len(self.class_names) != d.num_classes:
            raise DataError(f"dataset {d.dataset_name!r} has {len(self.class_names)} classes "
                            f"({self.class_names}), but data.num_classes is {d.num_classes}")
        for role, src in self.sources.items():
            if len(src) == 0:
                raise DataError(f"dataset {d.dataset_name!r}: split {d.splits[role]!r} is empty")
            shape = list(np.asarray(src.get(0)["image"]).shape)
            if shape != list(d.image_size):
                raise DataError(f"dataset {d.dataset_name!r}: split {d.splits[role]!r} has images of shape "
                                f"{shape}, but data.image_size is {list(d.image_size)}")

    def _source(self, split):
        d, pdata = self.cfg.data, self.pdata
        h, w, c = d.image_size
        if d.dataset_name == "synthetic_ddsm":
            if h != w or c != 1:
                raise DataError(f"synthetic_ddsm makes square 1-channel patches; data.image_size is {d.image_size}")
            return pdata.synthetic_ddsm(split, image_size=h, scale=d.scale, seed=d.seed)
        data_dir = os.path.expanduser(d.data_dir)
        if d.dataset_name == "hdf5":
            from podlet.data.hdf5 import hdf5_source
            return hdf5_source(os.path.join(data_dir, f"{split}*.h5"))
        from podlet.data.tfds import tfds_source
        return tfds_source(data_dir, name=d.dataset_name, split=split)

    def num_examples(self, role):
        return len(self.sources[role])

    def _dataset(self, role, *, training, batch_size, num_shards=1, shard_index=0):
        d, t = self.cfg.data, self.cfg.train
        ds = self.pdata.Dataset(self.sources[role])
        if training:
            ds = ds.shuffle(d.shuffle_buffer_size, seed=t.seed, reshuffle_each_iteration=True)
        n = d.normalization
        ds = ds.normalize("mean_std", mean=n.mean, std=n.std) if n.mode == "mean_std" else ds.normalize(n.mode)
        if training and d.augmentation.enabled:
            a = d.augmentation
            ds = ds.augment(translate=a.translate_pixels, rotate=a.rotation_degrees, brightness=a.brightness_delta,
                            contrast=None if a.contrast_range is None else tuple(a.contrast_range),
                            hflip=a.horizontal_flip, seed=t.seed)
        if training:
            ds = ds.repeat()  # the seed's order: batches span epoch boundaries
        ds = ds.batch(batch_size, drop_remainder=training)
        if num_shards > 1:
            _part(batch_size, num_shards, shard_index)
            ds = ds.shard_batches(num_shards, shard_index)
        return ds.prefetch(d.prefetch_batches) if d.prefetch_batches else ds

    def train_batches(self, batch_size, start_step=0, *, num_shards=1, shard_index=0):
        if self.num_examples("train") < batch_size:
            raise DataError(f"the train split has {self.num_examples('train')} examples, fewer than one "
                            f"batch of {batch_size} (raise data.scale or lower train.batch_size)")
        ds = self._dataset("train", training=True, batch_size=batch_size, num_shards=num_shards,
                           shard_index=shard_index)
        # iteration 0 always: the stream is a function of the seeds and the step alone
        it = ds.iterator(start_step=start_step, iteration=0)
        try:
            for b in it:
                yield {"image": b["image"], "label": np.asarray(b["label"], np.int32)}
        finally:
            it.close()

    def eval_batches(self, role, batch_size, *, num_shards=1, shard_index=0):
        it = self._dataset(role, training=False, batch_size=batch_size, num_shards=num_shards,
                           shard_index=shard_index).iterator(iteration=0)
        try:
            for b in it:
                yield _pad({"image": b["image"], "label": np.asarray(b["label"], np.int32)},
                           batch_size // num_shards)
        finally:
            it.close()


def make_data(cfg):
    """The dataset cfg.data names, served by podlet.data."""
    return PipelineData(cfg)
