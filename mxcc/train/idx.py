"""Read IDX files (the MNIST format), plain or gzip-compressed, into numpy arrays.

`read_idx` decodes one file (magic 0 0 <dtype code> <ndim>, ndim big-endian uint32 dims, big-endian data)
and `load_mnist` returns the (images, labels) pair of an MNIST split. Gzip is detected by its magic bytes,
not by the file name. A malformed file raises `IdxError` naming the file and the expected and actual
sizes. Batching, shuffling and normalization are left to the data iterators.
"""
from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from mxcc.errors import MxccError

GZIP_MAGIC = b"\x1f\x8b"
# IDX dtype code -> big-endian numpy dtype.
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
MNIST_SIDE = 28


class IdxError(MxccError):
    """An IDX data file is missing, malformed or truncated."""


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in one IDX file (gzipped or not), native byte order, writable."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise IdxError(f"{path}: cannot read IDX file: {e.strerror or e}") from None
    if raw.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:       # BadGzipFile is an OSError
            raise IdxError(f"{path}: corrupted or truncated gzip stream: {e}") from None
    return _decode_idx(raw, path)


def _decode_idx(raw: bytes, path: str) -> np.ndarray:
    if len(raw) < 4:
        raise IdxError(f"{path}: truncated IDX header: expected at least 4 bytes, got {len(raw)}",
                       expected=4, got=len(raw))
    zero0, zero1, code, ndim = raw[:4]
    if zero0 != 0 or zero1 != 0 or code not in IDX_DTYPES:
        raise IdxError(f"{path}: bad IDX magic {raw[:4].hex()} (expected 0000 followed by a dtype code "
                       f"in {', '.join(f'{c:02x}' for c in IDX_DTYPES)} and ndim)", got=raw[:4].hex())
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IdxError(f"{path}: truncated IDX header: expected {header} bytes for {ndim} dims, "
                       f"got {len(raw)}", expected=header, got=len(raw))
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(IDX_DTYPES[code])
    count = 1
    for d in dims:
        count *= d
    expected, actual = count * dtype.itemsize, len(raw) - header
    if actual != expected:
        what = "truncated" if actual < expected else "has trailing bytes"
        raise IdxError(f"{path}: IDX data {what}: shape {dims} of {dtype.name} needs {expected} bytes, "
                       f"file has {actual}", expected=expected, got=actual)
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header)
    return data.astype(dtype.newbyteorder("="), copy=True).reshape(dims)


def load_mnist(directory: str | os.PathLike, kind: str = "t10k") -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 28, 28), labels uint8 (N,)) of the MNIST split `kind` ("t10k" or "train"),
    from `<kind>-images-idx3-ubyte[.gz]` and `<kind>-labels-idx1-ubyte[.gz]` in `directory`."""
    images = read_idx(_find(Path(directory), f"{kind}-images-idx3-ubyte"))
    labels = read_idx(_find(Path(directory), f"{kind}-labels-idx1-ubyte"))
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (MNIST_SIDE, MNIST_SIDE):
        raise IdxError(f"{directory}: {kind} images are {images.dtype} {images.shape}, "
                       f"expected uint8 (N, 28, 28)", got=images.shape)
    if labels.dtype != np.uint8 or labels.shape != images.shape[:1]:
        raise IdxError(f"{directory}: {kind} labels are {labels.dtype} {labels.shape}, expected uint8 "
                       f"({images.shape[0]},) to match the images", expected=images.shape[:1],
                       got=labels.shape)
    if labels.size and labels.max() > 9:
        raise IdxError(f"{directory}: {kind} labels contain {int(labels.max())}, expected digits 0..9")
    return images, labels


def _find(directory: Path, stem: str) -> Path:
    for candidate in (directory / f"{stem}.gz", directory / stem):
        if candidate.is_file():
            return candidate
    raise IdxError(f"{directory}: no {stem}.gz or {stem} found")
