"""Concat, SliceChannel (split, multi-output) and slice_axis vs numpy, with negative axes, and their errors.

Tolerance: exact equality (block copies).
"""
import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import ShapeError
from mxcc_testing import needs_gcc

# (input shapes, dim)
CONCATS = [([(2, 3, 4), (2, 5, 4)], 1), ([(2, 3, 4), (2, 3, 1)], -1), ([(1, 3), (4, 3)], 0),
           ([(2, 1, 3), (2, 2, 3), (2, 4, 3)], 1), ([(2, 3)], 1), ([(3, 2, 2, 5), (3, 2, 7, 5)], -2)]
# (input shape, num_outputs, axis, squeeze_axis)
SPLITS = [((2, 6, 2), 3, 1, False), ((2, 3, 4), 2, -1, False), ((4, 3), 2, 0, False), ((2, 3, 5), 3, 1, True),
          ((5, 1), 1, 1, True)]
# (input shape, axis, begin, end)
SLICES = [((2, 4, 3), 1, 1, 3), ((2, 4, 6), -1, -3, None), ((5, 2), 0, 0, -1), ((3, 7), 1, 2, 7)]


@needs_gcc
def test_concat_split_slice_in_one_network(rng):
    ins, heads, refs = {}, [], []
    for i, (shapes, dim) in enumerate(CONCATS):
        names = [f"c{i}_{j}" for j in range(len(shapes))]
        ins.update({n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)})
        heads.append(sym.Concat(*[sym.var(n) for n in names], dim=dim))
        refs.append([np.concatenate([ins[n] for n in names], axis=dim)])
    for i, (shape, n, axis, squeeze) in enumerate(SPLITS):
        ins[f"s{i}"] = x = rng.standard_normal(shape).astype(np.float32)
        heads.append(sym.split(sym.var(f"s{i}"), num_outputs=n, axis=axis, squeeze_axis=squeeze))
        parts = np.split(x, n, axis=axis)
        refs.append([np.squeeze(p, axis=axis) if squeeze else p for p in parts])
    for i, (shape, axis, b, e) in enumerate(SLICES):
        ins[f"l{i}"] = x = rng.standard_normal(shape).astype(np.float32)
        heads.append(sym.slice_axis(sym.var(f"l{i}"), axis=axis, begin=b, end=e))
        sl = [slice(None)] * x.ndim
        sl[axis] = slice(b, e)
        refs.append([x[tuple(sl)]])
    # a split whose outputs feed kernels and a concat (not graph outputs themselves)
    ins["m"] = m = rng.standard_normal((2, 4, 3)).astype(np.float32)
    p = sym.SliceChannel(sym.var("m"), num_outputs=2, axis=1, name="sc")
    heads.append(sym.Concat(sym.relu(p[1]), p[0], sym.negative(p[1]), dim=2, name="cat"))
    refs.append([np.concatenate([np.maximum(m[:, 2:], 0), m[:, :2], -m[:, 2:]], axis=2)])
    outs = mxcc.compile(sym.Group(heads), {k: v.shape for k, v in ins.items()}).forward(**ins)
    flat = [r for rs in refs for r in rs]
    assert len(outs) == len(flat)
    for o, r in zip(outs, flat):
        assert o.shape == r.shape
        np.testing.assert_array_equal(o, r)


def test_split_output_names_and_count():
    s = sym.split(sym.var("d"), num_outputs=3, name="sp")
    assert len(s) == 3 and s.list_outputs() == ["sp_output0", "sp_output1", "sp_output2"]
    assert s.infer_shape(d=(2, 6))[1] == [(2, 2)] * 3


@pytest.mark.parametrize("build, shapes, msg", [
    (lambda a, b: sym.Concat(a, b, dim=1, name="cc"), dict(a=(2, 3, 4), b=(2, 3, 5)),
     r"cc \(Concat\): input 'arg1' has shape \(2, 3, 5\), expected \(2, \*, 4\)"),
    (lambda a, b: sym.Concat(a, b, dim=0, name="cc"), dict(a=(2, 3), b=(2, 3, 1)), "input 'arg1' has shape"),
    (lambda a, b: sym.Concat(a, b, dim=2, name="cc"), dict(a=(2, 3), b=(2, 3)), "dim 2 is out of range"),
    (lambda a, b: sym.split(a, num_outputs=4, name="sp"), dict(a=(2, 6)), "into num_outputs=4 equal parts"),
    (lambda a, b: sym.split(a, num_outputs=2, squeeze_axis=True), dict(a=(2, 6)), "squeeze_axis=True needs"),
    (lambda a, b: sym.slice_axis(a, axis=1, begin=2, end=2), dict(a=(2, 6)), "invalid slice"),
    (lambda a, b: sym.slice_axis(a, axis=1, begin=0, end=7), dict(a=(2, 6)), "invalid slice"),
    (lambda a, b: sym.slice_axis(a, axis=2, begin=0, end=1), dict(a=(2, 6)), "axis 2 is out of range"),
])
def test_errors(build, shapes, msg):
    net = build(sym.var("a"), sym.var("b"))
    with pytest.raises(ShapeError, match=msg):
        net.infer_shape(**shapes)
