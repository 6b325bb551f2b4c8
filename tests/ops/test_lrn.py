"""LRN compiled to C against float64 numpy: x / (knorm + alpha/nsize * sum of x^2 over the nsize channels
centred on c, clipped at the edges) ^ beta (MXNet's lrn-inl.h). Tolerance: a sum of nsize squares and one
powf (<= 1-2 ulp): 2e-6 of max|ref|."""
import json

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import AttrError
from mxcc_testing import needs_gcc, rel_err


def lrn_ref(x, nsize, alpha=1e-4, beta=0.75, knorm=2.0):
    c, h = x.shape[1], nsize // 2
    sq = x.astype(np.float64) ** 2
    acc = np.stack([sq[:, max(0, j - h):j + h + 1].sum(axis=1) for j in range(c)], axis=1)
    return x / (knorm + alpha / nsize * acc) ** beta


@needs_gcc
def test_lrn_matches_numpy(rng):
    x = (rng.standard_normal((2, 7, 5, 3)) * 10).astype(np.float32)
    cases = [dict(nsize=5), dict(nsize=3, alpha=0.01, beta=0.5, knorm=1.0), dict(nsize=1, alpha=0.1),
             dict(nsize=9, alpha=1e-3)]          # 9 > channels: the window covers every channel
    d = sym.var("data")
    m = mxcc.compile(sym.Group([sym.LRN(d, **at) for at in cases]), {"data": x.shape})
    for at, out in zip(cases, m.forward(data=x)):
        assert rel_err(out, lrn_ref(x, **at)) <= 2e-6, at


def test_hidden_tmp_norm_output_and_errors():
    net = sym.LRN(sym.var("data"), nsize=5, name="lrn")
    assert net.list_outputs() == ["lrn_output"]
    row_ptr = json.loads(net.tojson())["node_row_ptr"]
    assert row_ptr[-1] - row_ptr[-2] == 2
    with pytest.raises(AttrError, match="odd"):
        sym.LRN(sym.var("data"), nsize=4)
