"""UpSampling (nearest) compiled to C against numpy repeat: one input, and several inputs of different
sizes concatenated along channels or summed (each scaled to the first input's size times `scale`).
Exact: nearest upsampling copies values (and a sum of two copies is one float add, as in numpy)."""
import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import ShapeError
from mxcc_testing import needs_gcc


def up(x, s):
    return x.repeat(s, axis=2).repeat(s, axis=3)


@needs_gcc
def test_nearest_single_concat_and_sum(rng):
    a = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    b = rng.standard_normal((2, 2, 2, 3)).astype(np.float32)
    c = rng.standard_normal((2, 3, 8, 12)).astype(np.float32)
    va, vb, vc = sym.var("a"), sym.var("b"), sym.var("c")
    net = sym.Group([
        sym.UpSampling(va, scale=3, sample_type="nearest", num_args=1),
        sym.UpSampling(va, vb, vc, scale=2, sample_type="nearest", num_args=3),                # concat
        sym.UpSampling(va, vc, scale=4, sample_type="nearest", num_args=2, multi_input_mode="sum"),
    ])
    outs = mxcc.compile(net, {"a": a.shape, "b": b.shape, "c": c.shape}).forward(a=a, b=b, c=c)
    np.testing.assert_array_equal(outs[0], up(a, 3))
    np.testing.assert_array_equal(outs[1], np.concatenate([up(a, 2), up(b, 4), up(c, 1)], axis=1))
    np.testing.assert_array_equal(outs[2], up(a, 4) + up(c, 2))


def test_shape_errors():
    a, b = sym.var("a"), sym.var("b")
    with pytest.raises(ShapeError, match="does not scale by an integer"):
        sym.UpSampling(a, b, scale=2, sample_type="nearest", num_args=2, name="u").infer_shape(
            a=(1, 2, 4, 4), b=(1, 2, 3, 3))
    with pytest.raises(ShapeError, match="multi_input_mode='sum'"):
        sym.UpSampling(a, b, scale=2, sample_type="nearest", num_args=2, multi_input_mode="sum",
                       name="u").infer_shape(a=(1, 2, 4, 4), b=(1, 3, 2, 2))
    with pytest.raises(ShapeError, match="num_filter"):        # bilinear: a depthwise deconvolution per channel
        sym.UpSampling(a, sym.var("w"), scale=2, sample_type="bilinear", num_filter=3, name="u").infer_shape(
            a=(1, 2, 4, 4))
