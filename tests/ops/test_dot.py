"""dot (every transpose combination, 1-d operands, N-d . 2-d) and batch_dot (3-d and 4-d, transposes) vs
numpy float64, an activation fused into the GEMM epilogue, and shape errors.

numpy reference: MXNet's rule read independently: dot contracts lhs's last axis (or, transposed, its first)
with rhs's first axis (or, transposed, its last). Tolerance: float32 GEMM with FMA over K terms:
rel 1e-6 * sqrt(K) of the output scale.
"""
import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.compiler.driver import inspect_network
from mxcc.errors import ShapeError
from mxcc.options import CompileOptions
from mxcc_testing import needs_gcc, rel_err


def _np_dot(a, b, ta, tb):
    a, b = a.astype(np.float64), b.astype(np.float64)
    if a.ndim == 1 and b.ndim == 1:
        return np.array([a @ b])
    if ta:
        a = np.moveaxis(a, 0, -1)          # (K, rest...) -> (rest..., K)
    if tb:
        b = np.moveaxis(b, -1, 0)          # (rest..., K) -> (K, rest...)
    return np.tensordot(a, b, axes=([a.ndim - 1], [0]))


DOTS = [  # (lhs shape, rhs shape, transpose_a, transpose_b)
    ((3, 4), (4, 5), False, False), ((4, 3), (4, 5), True, False), ((3, 4), (5, 4), False, True),
    ((4, 3), (5, 4), True, True), ((2, 3, 4), (4, 5), False, False), ((4, 2, 3), (4, 5), True, False),
    ((2, 3, 4), (5, 4), False, True), ((3, 4), (4, 2, 5), False, False), ((3, 4), (5, 2, 4), False, True),
    ((4,), (4,), False, False), ((4,), (4, 5), False, False), ((3, 4), (4,), False, False),
    ((4,), (4, 5), True, False), ((3, 4), (4,), False, True), ((65, 130), (130, 33), False, False),
]
BATCH = [((2, 3, 4), (2, 4, 5), False, False), ((2, 4, 3), (2, 4, 5), True, False),
         ((2, 3, 4), (2, 5, 4), False, True), ((3, 4, 2), (3, 5, 4), True, True),
         ((2, 3, 4, 6), (2, 3, 6, 5), False, False)]


@needs_gcc
def test_dot_and_batch_dot_in_one_network(rng):
    ins, heads, refs, ks = {}, [], [], []
    for i, (ls, rs, ta, tb) in enumerate(DOTS + BATCH):
        a, b = rng.standard_normal(ls).astype(np.float32), rng.standard_normal(rs).astype(np.float32)
        ins[f"a{i}"], ins[f"b{i}"] = a, b
        batch = i >= len(DOTS)
        op = sym.batch_dot if batch else sym.dot
        heads.append(op(sym.var(f"a{i}"), sym.var(f"b{i}"), transpose_a=ta, transpose_b=tb))
        if batch:
            a64 = np.swapaxes(a, -1, -2) if ta else a
            b64 = np.swapaxes(b, -1, -2) if tb else b
            refs.append(np.matmul(a64.astype(np.float64), b64.astype(np.float64)))
            ks.append(a64.shape[-1])
        else:
            refs.append(_np_dot(a, b, ta, tb))
            ks.append(ls[0] if ta else ls[-1])
    outs = mxcc.compile(sym.Group(heads), {k: v.shape for k, v in ins.items()}).forward(**ins)
    for i, (o, r, k) in enumerate(zip(outs, refs, ks)):
        assert o.shape == r.shape, i
        assert rel_err(o, r) <= 1e-6 * np.sqrt(k), i


@needs_gcc
def test_dot_with_fused_activation(rng):
    a, b = rng.standard_normal((5, 20)).astype(np.float32), rng.standard_normal((20, 6)).astype(np.float32)
    net = sym.relu(sym.dot(sym.var("a"), sym.var("b"), name="d"), name="r")
    bd = sym.Activation(sym.batch_dot(sym.var("a3"), sym.var("b3"), name="bd"), act_type="tanh", name="t")
    shapes = {"a": a.shape, "b": b.shape, "a3": (2, 5, 20), "b3": (2, 20, 6)}
    both = sym.Group([net, bd])
    assert [g["members"] for g in inspect_network(both, shapes, CompileOptions())["groups"]] == \
        [["d", "r"], ["bd", "t"]]
    a3, b3 = np.stack([a, -a]), np.stack([b, b])
    outs = mxcc.compile(both, shapes).forward(a=a, b=b, a3=a3, b3=b3)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert rel_err(outs[0], np.maximum(ref, 0)) <= 1e-6 * np.sqrt(20)
    assert rel_err(outs[1], np.tanh(np.stack([ref, -ref]))) <= 1e-6 * np.sqrt(20)


@pytest.mark.parametrize("op, kw, shapes, msg", [
    ("dot", {}, dict(a=(3, 4), b=(5, 6)), "reduction sizes 4 and 5 differ"),
    ("dot", dict(transpose_a=True), dict(a=(4,), b=(4,)), "cannot transpose vectors"),
    ("dot", {}, dict(a=(3,), b=(4,)), "vectors of lengths 3 and 4"),
    ("batch_dot", {}, dict(a=(3, 4), b=(3, 4)), "N >= 3"),
    ("batch_dot", {}, dict(a=(2, 3, 4), b=(3, 4, 5)), "batch dimensions differ"),
    ("batch_dot", dict(transpose_b=True), dict(a=(2, 3, 4), b=(2, 4, 5)), "batch_dot shape error"),
])
def test_errors(op, kw, shapes, msg):
    with pytest.raises(ShapeError, match=msg):
        getattr(sym, op)(sym.var("a"), sym.var("b"), **kw).infer_shape(**shapes)
