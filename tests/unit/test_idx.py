"""mxcc.train.idx against the real MNIST test set shipped in examples/data/mnist and hand-built IDX files.

Independent truth: the published md5 sums (in the shipped README), the published t10k label histogram,
and IDX files written here with `struct` from the format description (big-endian dims and data).
"""
from __future__ import annotations

import gzip
import hashlib
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from mxcc.train.idx import IdxError, load_mnist, read_idx

MNIST = Path(__file__).resolve().parents[2] / "examples" / "data" / "mnist"
# Digits 0..9 in the 10,000 MNIST test labels, as published with the data set.
T10K_LABEL_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
CODES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.int16, 0x0C: np.int32, 0x0D: np.float32,
         0x0E: np.float64}


def idx_bytes(arr: np.ndarray, code: int) -> bytes:
    head = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return head + arr.astype(np.dtype(arr.dtype).newbyteorder(">")).tobytes()


def test_shipped_files_match_published_md5():
    readme = (MNIST / "README.md").read_text()
    assert "LeCun" in readme and "CC BY-SA 3.0" in readme                  # attribution kept
    published = dict(re.findall(r"\| (t10k-\S+\.gz) \| ([0-9a-f]{32}) \|", readme))
    assert len(published) == 2
    for name, md5 in published.items():
        assert hashlib.md5((MNIST / name).read_bytes()).hexdigest() == md5


def test_read_real_mnist():
    images = read_idx(MNIST / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(MNIST / "t10k-labels-idx1-ubyte.gz")
    assert images.shape == (10000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (10000,) and labels.dtype == np.uint8
    assert np.bincount(labels, minlength=10).tolist() == T10K_LABEL_COUNTS
    assert images.max() == 255 and images.min() == 0
    assert (images[:, 0, :] == 0).all()                                      # 28x28 frames have blank borders


def test_load_mnist():
    images, labels = load_mnist(MNIST)
    assert images.shape == (10000, 28, 28) and labels.shape == (10000,)
    assert labels.max() == 9
    with pytest.raises(IdxError, match="no train-images-idx3-ubyte"):
        load_mnist(MNIST, kind="train")


@pytest.mark.parametrize("code", sorted(CODES))
@pytest.mark.parametrize("compress", [False, True])
def test_hand_built_every_dtype(tmp_path, code, compress):
    rng = np.random.default_rng(code)
    arr = (rng.standard_normal((3, 4, 5)) * 100).astype(CODES[code])
    blob = idx_bytes(arr, code)
    p = tmp_path / "data.idx"                       # gzip is found by its magic, never by the name
    p.write_bytes(gzip.compress(blob) if compress else blob)
    got = read_idx(p)
    assert got.dtype == arr.dtype and got.shape == arr.shape and got.flags.writeable
    np.testing.assert_array_equal(got, arr)


def test_uncompressed_file_named_gz(tmp_path):
    p = tmp_path / "labels.gz"
    p.write_bytes(idx_bytes(np.arange(7, dtype=np.uint8), 0x08))
    assert read_idx(p).tolist() == list(range(7))


@pytest.mark.parametrize("blob, match", [
    (b"\x00\x00", "expected at least 4 bytes, got 2"),
    (b"\x00\x01\x08\x01" + bytes(8), "bad IDX magic 00010801"),
    (b"\x00\x00\x07\x01" + bytes(8), "bad IDX magic 00000701"),
    (b"\x00\x00\x08\x03\x00\x00\x00\x02", "expected 16 bytes for 3 dims, got 8"),
    (b"\x00\x00\x0d\x01\x00\x00\x00\x03" + bytes(11), "truncated.*needs 12 bytes, file has 11"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x03" + bytes(5), "trailing bytes.*needs 3 bytes, file has 5"),
    (b"\x00\x00\x08\x01\xff\xff\xff\xff" + bytes(5), "needs 4294967295 bytes, file has 5"),
])
def test_malformed_files(tmp_path, blob, match):
    p = tmp_path / "bad.idx"
    p.write_bytes(blob)
    with pytest.raises(IdxError, match=r"bad\.idx: .*" + match):
        read_idx(p)


def test_truncated_real_files(tmp_path):
    gz = (MNIST / "t10k-labels-idx1-ubyte.gz").read_bytes()
    p = tmp_path / "cut.gz"
    p.write_bytes(gz[: len(gz) // 2])
    with pytest.raises(IdxError, match="cut.gz: corrupted or truncated gzip"):
        read_idx(p)
    p.write_bytes(gzip.compress(gzip.decompress(gz)[:-10]))             # valid gzip, short payload
    with pytest.raises(IdxError, match="truncated.*needs 10000 bytes, file has 9990"):
        read_idx(p)


def test_missing_file(tmp_path):
    with pytest.raises(IdxError, match="cannot read"):
        read_idx(tmp_path / "nope")
