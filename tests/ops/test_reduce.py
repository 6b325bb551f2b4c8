"""sum, mean, max, min over axes (int, tuple, negative, None and () = all, keepdims, exclude) vs numpy.

Tolerances: sum/mean accumulate in double and round once to float32, against a float64 numpy sum:
<= 1 float32 ulp of the output scale (rel 1.2e-7; 2e-7 allowed). max/min select an input: exact.
"""
import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import ShapeError
from mxcc_testing import needs_gcc, rel_err

NP = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
X = (2, 3, 4, 5)
CASES = [  # (op, attrs, numpy axis)
    ("sum", {}, None), ("mean", dict(axis=1), 1), ("max", dict(axis=-1), 3), ("min", dict(axis=(1, 3)), (1, 3)),
    ("sum", dict(axis=(0, 2, 3)), (0, 2, 3)), ("mean", dict(axis=(2, 3), keepdims=True), (2, 3)),
    ("max", dict(axis=1, exclude=True), (0, 2, 3)), ("min", dict(axis=(0, -1), exclude=True), (1, 2)),
    ("sum", dict(axis=(0, 3), exclude=True, keepdims=True), (1, 2)), ("mean", dict(axis=()), None),
    ("max", dict(keepdims=True), None), ("sum_axis", dict(axis=0), 0), ("min_axis", dict(axis=-3), 1),
    ("max_axis", dict(axis=(0, 1, 2, 3), exclude=True), ()),
]


def _ref(op, x, attrs, axis):
    f = NP[op.replace("_axis", "")]
    keep = attrs.get("keepdims", False)
    if axis == ():
        return x.astype(np.float64)
    r = f(x.astype(np.float64), axis=axis, keepdims=keep)
    return np.asarray(r).reshape(-1) if axis is None and not keep else r   # full reduction: shape (1,)


@needs_gcc
def test_reductions_in_one_network(rng):
    x = rng.standard_normal(X).astype(np.float32)
    big = rng.standard_normal((64, 50, 30)).astype(np.float32) + 1.0     # the OpenMP path
    d, b = sym.var("data"), sym.var("big")
    heads = [getattr(sym, op)(d, **a) for op, a, _ in CASES]
    refs = [_ref(op, x, a, ax) for op, a, ax in CASES]
    for op, ax in [("sum", 0), ("mean", (0, 2)), ("max", 2), ("min", (1, 2))]:
        heads.append(getattr(sym, op)(b, axis=ax))
        refs.append(NP[op](big.astype(np.float64), axis=ax))
    outs = mxcc.compile(sym.Group(heads), {"data": X, "big": big.shape}).forward(data=x, big=big)
    for i, (o, r) in enumerate(zip(outs, refs)):
        assert o.shape == r.shape, i
        assert rel_err(o, r) <= 2e-7, i


@pytest.mark.parametrize("attrs, want", [
    ({}, (1,)), (dict(keepdims=True), (1, 1, 1, 1)), (dict(axis=1), (2, 4, 5)),
    (dict(axis=(1, 2), exclude=True), (3, 4)), (dict(axis=(1, 2), exclude=True, keepdims=True), (1, 3, 4, 1)),
    (dict(axis=(), exclude=True), (1,)),                 # MXNet: an empty axis reduces everything, exclude or not
])
def test_shapes(attrs, want):
    assert sym.sum(sym.var("d"), **attrs).infer_shape(d=X)[1] == [want]


@pytest.mark.parametrize("attrs, msg", [(dict(axis=4), "out of range"), (dict(axis=(1, -3)), "duplicates"),
                                        (dict(axis=-5), "out of range")])
def test_errors(attrs, msg):
    with pytest.raises(ShapeError, match=msg):
        sym.mean(sym.var("d"), name="m", **attrs).infer_shape(d=X)
