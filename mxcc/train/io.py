"""Data iterators with MXNet 1.9's batching semantics (`mx.io`), over numpy arrays.

`NDArrayIter` reproduces mx.io.NDArrayIter exactly: arrays converted to float32, inputs ordered by name,
last_batch_handle 'pad' (wrap around to the start, `pad` = wrapped count), 'discard' (drop the short
batch) and 'roll_over' (keep the short batch and complete it at the start of the next epoch; that first
batch reports `pad` = the number of carried samples, as MXNet does). With shuffle=True it reorders with a
np.random.RandomState(seed) exactly as MXNet reorders with numpy's global state, so the two agree when
MXNet runs after np.random.seed(seed). `MNISTIter` reproduces MXNet's C++ MNISTIter: pixels times 1/256,
short last batch dropped, one shuffle at construction. `DataBatch`/`DataDesc` are MXNet's records.
Reading the IDX files is mxcc.train.idx's job; the compiled executor only ever sees the arrays.
"""
from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from mxcc.train.idx import read_idx

_F32 = np.float32
LAST_BATCH_HANDLES = ("pad", "discard", "roll_over")


class DataDesc(tuple):
    """(name, shape) with `dtype` and `layout` attributes, as mx.io.DataDesc (a namedtuple subclass)."""

    def __new__(cls, name: str, shape, dtype=_F32, layout: str = "NCHW"):
        ret = super().__new__(cls, (name, tuple(shape)))
        ret.dtype, ret.layout = dtype, layout
        return ret

    name = property(lambda self: self[0])
    shape = property(lambda self: self[1])

    def __repr__(self) -> str:
        return f"DataDesc[{self.name},{self.shape},{self.dtype},{self.layout}]"

    @staticmethod
    def get_batch_axis(layout: str | None) -> int:
        return 0 if layout is None else layout.find("N")


class DataBatch:
    """One batch: lists of arrays (`data`, `label`), `pad` (trailing samples that are filler) and
    `index` (sample indices, when the iterator knows them)."""

    def __init__(self, data, label=None, pad=None, index=None, bucket_key=None, provide_data=None,
                 provide_label=None):
        if data is not None and not isinstance(data, (list, tuple)):
            raise TypeError("Data must be list of arrays")
        if label is not None and not isinstance(label, (list, tuple)):
            raise TypeError("Label must be list of arrays")
        self.data, self.label, self.pad, self.index = data, label, pad, index
        self.bucket_key, self.provide_data, self.provide_label = bucket_key, provide_data, provide_label

    def __str__(self) -> str:
        label_shapes = [x.shape for x in self.label] if self.label else None
        return f"DataBatch: data shapes: {[d.shape for d in self.data]} label shapes: {label_shapes}"


class DataIter:
    """Base: a Python iterator of DataBatch with reset() and the batch description."""

    def __init__(self, batch_size: int = 0):
        self.batch_size = batch_size

    def __iter__(self):
        return self

    def __next__(self) -> DataBatch:
        return self.next()

    def reset(self) -> None:
        pass

    def next(self) -> DataBatch:
        raise NotImplementedError


def _init_data(data, allow_empty: bool, default_name: str) -> list[tuple[str, np.ndarray]]:
    """MXNet's canonical form: [(name, float32 array)] sorted by name (lists become _0_<name>, _1_<name>)."""
    if data is None:
        if not allow_empty:
            raise ValueError("data must not be None")
        data = []
    if isinstance(data, np.ndarray) or not isinstance(data, (list, tuple, dict)):
        data = [data]
    if isinstance(data, (list, tuple)):
        if not data and not allow_empty:
            raise ValueError("data must not be empty")
        data = OrderedDict([(default_name, data[0])] if len(data) == 1 else
                           [(f"_{i}_{default_name}", d) for i, d in enumerate(data)])
    # NOTE: mx.nd.array turns every numpy input into float32 (mx_real_t), labels included.
    return sorted((k, np.array(v, dtype=_F32)) for k, v in data.items())


class NDArrayIter(DataIter):
    """Batches over in-memory arrays (see the module docstring for the last-batch rules).

    data, label: an array, a list of arrays or a {name: array} dict; batches slice axis 0.
    seed: seeds the RandomState used for shuffling (MXNet uses numpy's global state instead).
    """

    def __init__(self, data, label=None, batch_size: int = 1, shuffle: bool = False,
                 last_batch_handle: str = "pad", data_name: str = "data", label_name: str = "softmax_label",
                 layout: str = "NCHW", seed: int | None = 0):
        super().__init__(batch_size)
        if last_batch_handle not in LAST_BATCH_HANDLES:
            raise ValueError(f"last_batch_handle must be one of {LAST_BATCH_HANDLES}, got {last_batch_handle!r}")
        if layout.find("N") != 0:
            raise ValueError(f"only layouts with the batch axis first are supported, got {layout!r}")
        self.data = _init_data(data, allow_empty=False, default_name=data_name)
        self.label = _init_data(label, allow_empty=True, default_name=label_name)
        self.num_data = self.data[0][1].shape[0]
        for k, v in self.data + self.label:
            if v.shape[0] != self.num_data:
                raise ValueError(f"{k!r} has {v.shape[0]} samples, {self.data[0][0]!r} has {self.num_data}")
        self.idx = np.arange(self.num_data)
        self.shuffle, self.last_batch_handle, self.layout = shuffle, last_batch_handle, layout
        self._rng = np.random.RandomState(seed)
        self.cursor = -batch_size
        self._cache_data = self._cache_label = None
        self.reset()                         # MXNet shuffles once at construction

    @property
    def provide_data(self) -> list[DataDesc]:
        return [DataDesc(k, (self.batch_size,) + v.shape[1:], v.dtype.type, self.layout) for k, v in self.data]

    @property
    def provide_label(self) -> list[DataDesc]:
        return [DataDesc(k, (self.batch_size,) + v.shape[1:], v.dtype.type, self.layout) for k, v in self.label]

    def hard_reset(self) -> None:
        """Back to the start, dropping any rolled-over samples."""
        if self.shuffle:
            self._shuffle_data()
        self.cursor = -self.batch_size
        self._cache_data = self._cache_label = None

    def reset(self) -> None:
        if self.shuffle:
            self._shuffle_data()
        if self.last_batch_handle == "roll_over" and \
                self.num_data - self.batch_size < self.cursor < self.num_data:
            # the short batch of the epoch just ended is carried: start that many samples early
            self.cursor = self.cursor - self.num_data - self.batch_size
        else:
            self.cursor = -self.batch_size

    def iter_next(self) -> bool:
        self.cursor += self.batch_size
        return self.cursor < self.num_data

    def next(self) -> DataBatch:
        if not self.iter_next():
            raise StopIteration
        data, label = self._batchify(self.data, "_cache_data"), self._batchify(self.label, "_cache_label")
        if data[0].shape[0] != self.batch_size:
            self._cache_data, self._cache_label = data, label       # kept for 'roll_over'
            raise StopIteration
        return DataBatch(data=data, label=label, pad=self.getpad(), index=None)

    def getpad(self) -> int:
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            return self.cursor + self.batch_size - self.num_data
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            return -self.cursor
        return 0

    def _batchify(self, source, cache_attr: str) -> list[np.ndarray]:
        if not source:
            return []
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            cached = getattr(self, cache_attr)
            if cached is None:
                raise RuntimeError("next epoch should have cached data (reset() was called before the "
                                   "epoch's short batch was reached)")
            setattr(self, cache_attr, None)
            end = self.cursor + self.batch_size
            return [np.concatenate([c, v[:end]]) for c, (_, v) in zip(cached, source)]
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            pad = self.batch_size - self.num_data + self.cursor
            out = []
            for _, v in source:
                wrap = np.concatenate([np.tile(v, (pad // self.num_data,) + (1,) * (v.ndim - 1)),
                                       v[:pad % self.num_data]]) if pad > self.num_data else v[:pad]
                out.append(np.concatenate([v[self.cursor:], wrap]))
            return out
        end = min(self.cursor + self.batch_size, self.num_data)
        return [v[self.cursor:end].copy() for _, v in source]

    def _shuffle_data(self) -> None:
        # MXNet shuffles its index array in place and re-gathers the already shuffled data with it.
        self._rng.shuffle(self.idx)
        self.data = [(k, v[self.idx]) for k, v in self.data]
        self.label = [(k, v[self.idx]) for k, v in self.label]


class MNISTIter(DataIter):
    """MXNet's MNISTIter over IDX files (gzipped or not): data (batch, 1, 28, 28), or (batch, 784) with
    flat=True, float32 pixel * scale (MXNet: 1/256, so values lie in [0, 255/256]); label (batch,)
    float32 digits. Only full batches are returned (pad is always 0). shuffle (MXNet's default: True)
    permutes the samples once, at construction, with numpy seeded by `seed`; the permutation is not
    MXNet's (that one comes from C++ std::shuffle), and every epoch sees the same order, as in MXNet.

    mxcc additions: `start`/`end` select the file's rows [start, end) before anything else (the examples
    train on test-set rows 0..8000 and validate on 8000..10000), `input_shape` reshapes each sample,
    `scale` changes the pixel factor (1/255 reproduces the mxnet-ref training traces). num_parts /
    part_index then split the selected rows as MXNet does: part i is rows
    [int(n / num_parts * i), int(n / num_parts * (i + 1))).
    """

    def __init__(self, image: str | os.PathLike, label: str | os.PathLike, batch_size: int = 128,
                 shuffle: bool = True, flat: bool = False, seed: int = 0, silent: bool = True,
                 num_parts: int = 1, part_index: int = 0, *, start: int = 0, end: int | None = None,
                 input_shape=None, scale: float = 1.0 / 256.0, data_name: str = "data",
                 label_name: str = "softmax_label"):
        super().__init__(batch_size)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0 <= part_index < num_parts:
            raise ValueError(f"part_index must be in [0, num_parts={num_parts}), got {part_index}")
        images, labels = read_idx(image), read_idx(label)
        if images.ndim != 3 or labels.shape != images.shape[:1]:
            raise ValueError(f"{image}, {label}: expected images (N, rows, cols) and labels (N,), got "
                             f"{images.shape} and {labels.shape}")
        index = np.arange(images.shape[0])[start:end]
        n = index.shape[0]
        lo, hi = int(float(n) / num_parts * part_index), int(float(n) / num_parts * (part_index + 1))
        index = index[lo:hi]
        if shuffle:
            index = index[np.random.default_rng(seed).permutation(index.shape[0])]
        sample = images.shape[1:]
        if input_shape is not None:
            sample = tuple(input_shape)
        elif flat:
            sample = (int(np.prod(sample)),)
        else:
            sample = (1,) + sample
        if int(np.prod(sample)) != int(np.prod(images.shape[1:])):
            raise ValueError(f"input_shape {sample} does not hold a {images.shape[1:]} image")
        # NOTE: MXNet multiplies by the float 1/256 (exact), not divides by 255.
        self._images = (images[index].astype(_F32) * _F32(scale)).reshape((index.shape[0],) + sample)
        self._labels = labels[index].astype(_F32)
        self._index = index
        self._names = (data_name, label_name)
        self.loc = 0

    @property
    def num_data(self) -> int:
        return self._images.shape[0]

    @property
    def provide_data(self) -> list[DataDesc]:
        return [DataDesc(self._names[0], (self.batch_size,) + self._images.shape[1:])]

    @property
    def provide_label(self) -> list[DataDesc]:
        return [DataDesc(self._names[1], (self.batch_size,))]

    def reset(self) -> None:
        self.loc = 0

    def next(self) -> DataBatch:
        if self.loc + self.batch_size > self.num_data:
            raise StopIteration
        s = slice(self.loc, self.loc + self.batch_size)
        self.loc += self.batch_size
        return DataBatch([self._images[s]], [self._labels[s]], pad=0, index=self._index[s])
