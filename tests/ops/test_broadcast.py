"""broadcast_add/sub/mul/div/maximum/minimum vs numpy broadcasting (size-1 dims in either operand, different
ranks, both operands stretched, a large case on the OpenMP path), NaN propagation, and errors.

Tolerance: exact equality; each output element is one float32 operation on the same two floats as numpy's.
"""
import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import ShapeError
from mxcc.ops._util import broadcast_strides, merge_loops
from mxcc_testing import needs_gcc

NP = {"broadcast_add": np.add, "broadcast_sub": np.subtract, "broadcast_mul": np.multiply,
      "broadcast_div": np.divide, "broadcast_maximum": np.maximum, "broadcast_minimum": np.minimum,
      "broadcast_plus": np.add, "broadcast_minus": np.subtract}
CASES = [  # (op, lhs shape, rhs shape)
    ("broadcast_add", (2, 3, 4), (1, 3, 1)), ("broadcast_sub", (2, 1, 4), (1, 3, 1)),
    ("broadcast_mul", (3, 1), (1, 4)), ("broadcast_div", (2, 3, 4), (4,)), ("broadcast_add", (4,), (2, 3, 4)),
    ("broadcast_sub", (1,), (2, 3)), ("broadcast_mul", (2, 3), (2, 3)), ("broadcast_div", (1, 1, 1), (2, 3, 4)),
    ("broadcast_maximum", (5, 1, 7), (1, 6, 1)), ("broadcast_minimum", (2, 3, 2, 2), (1, 3, 1, 1)),
    ("broadcast_plus", (64, 32, 40), (64, 1, 40)), ("broadcast_minus", (3, 4, 1), (3, 4, 5)),
    ("broadcast_maximum", (2, 5), (2, 1)), ("broadcast_minimum", (1, 5), (3, 5)),
]


@needs_gcc
def test_broadcast_ops_in_one_network(rng):
    ins, heads, refs = {}, [], []
    for i, (op, ls, rs) in enumerate(CASES):
        a = rng.standard_normal(ls).astype(np.float32)
        b = rng.standard_normal(rs).astype(np.float32) + (3.0 if op == "broadcast_div" else 0.0)
        if op in ("broadcast_maximum", "broadcast_minimum"):
            a.flat[::5] = np.nan        # a NaN on either side wins, as in numpy and mshadow_op
            b.flat[1::4] = np.nan
        ins[f"a{i}"], ins[f"b{i}"] = a, b
        heads.append(getattr(sym, op)(sym.var(f"a{i}"), sym.var(f"b{i}")))
        refs.append(NP[op](a, b))
    outs = mxcc.compile(sym.Group(heads), {k: v.shape for k, v in ins.items()}).forward(**ins)
    for (op, _, _), o, r in zip(CASES, outs, refs):
        assert o.shape == r.shape, op
        np.testing.assert_array_equal(o, r, err_msg=op)


def test_loop_merging():
    # (2,3,4) + (1,3,1): lhs is contiguous throughout, rhs steps only along the 3: three loops remain
    out = (2, 3, 4)
    ext, (so, sl, sr) = merge_loops(out, [(12, 4, 1), broadcast_strides((2, 3, 4), out),
                                          broadcast_strides((1, 3, 1), out)])
    assert ext == (2, 3, 4) and sr == (0, 1, 0)
    # (2,3,4) + (4,) ... and (6, 1, 4) + (1, 1, 4): the leading dims merge into one loop
    assert merge_loops((2, 3, 4), [(12, 4, 1), (0, 0, 1)])[0] == (6, 4)
    assert merge_loops((6, 1, 4), [(4, 4, 1), (0, 0, 1)])[0] == (6, 4)
    assert merge_loops((1, 1), [(1, 1)]) == ((1,), [(0,)])


def test_broadcast_shapes_and_errors():
    a, b = sym.var("a"), sym.var("b")
    assert sym.broadcast_add(a, b).infer_shape(a=(5, 1, 7), b=(6, 1))[1] == [(5, 6, 7)]
    with pytest.raises(ShapeError, match=r"bc \(broadcast_mul\): operands could not be broadcast together "
                                         r"with shapes \(2, 3\) \(4, 3\)"):
        sym.broadcast_mul(a, b, name="bc").infer_shape(a=(2, 3), b=(4, 3))
