"""Helpers shared by the tests (imported by name: `from mxcc_testing import ...`)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

needs_gcc = pytest.mark.skipif(shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler (gcc)")


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max|got - ref| / max|ref|: MXNet's README's acceptance measure (safe for outputs crossing zero)."""
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - ref))) / scale


# ---- runtime_c/conv/ tests (test_conv.py, test_conv_packed.py) ----

def conv_geom(ffi, c, size, k, s, p, d):
    """A mxcc_conv_geom for spatial tuples of length 1-3 (leading dimensions 1, as the compiler writes)."""
    pad3 = lambda t, f: (f,) * (3 - len(t)) + tuple(t)   # noqa: E731
    out = tuple((size[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(len(size)))
    g = ffi.new("mxcc_conv_geom *", dict(channels=c, **{"in": pad3(size, 1)}, out=pad3(out, 1), k=pad3(k, 1),
                                         stride=pad3(s, 1), pad=pad3(p, 0), dilate=pad3(d, 1)))
    return g, out


def float_buf(ffi, a):
    """A cffi float[] view of a numpy float32 array (no copy)."""
    return ffi.from_buffer("float[]", a)


def im2col_np(x, k, s, p, d, out):
    """x (C, *size) -> (C * prod(k), prod(out)) in float64: rows (c, offsets), columns output positions."""
    xp = np.pad(x, [(0, 0)] + [(v, v) for v in p])
    rows = []
    for c in range(x.shape[0]):
        for off in np.ndindex(*k):
            win = tuple(slice(off[i] * d[i], off[i] * d[i] + (out[i] - 1) * s[i] + 1, s[i]) for i in range(len(k)))
            rows.append(xp[c][win].reshape(-1))
    return np.stack(rows)
