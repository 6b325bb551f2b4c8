"""Embedding, add_n/ElementWiseSum, SoftmaxActivation and the loss heads' inference forward
(LinearRegressionOutput, MAERegressionOutput, LogisticRegressionOutput, MakeLoss) vs numpy.

Tolerances: Embedding copies rows and the identity heads copy: exact. add_n sums left to right in float32
like numpy's (a + b) + c: exact. Softmax/sigmoid: expf within 1-2 ulp, rel 2e-6.
"""
import numpy as np

import mxcc
from mxcc import sym
from mxcc.compiler.driver import inspect_network
from mxcc.options import CompileOptions
from mxcc_testing import needs_gcc, rel_err


def _softmax(z, axis):
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


@needs_gcc
def test_embedding_add_n_softmax_activation_and_heads(rng):
    w = rng.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([[0, 5, 2.7], [-3, 9, 1.2], [5.9, -0.5, 3]], np.float32)   # truncated, then clipped to [0, 5]
    x = (rng.standard_normal((2, 3, 4)) * 3).astype(np.float32)
    a, b, c = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(3))
    d, A, B, C = sym.var("x"), sym.var("a"), sym.var("b"), sym.var("c")
    lbl = sym.var("label")
    heads = [
        sym.Embedding(sym.var("idx"), input_dim=6, output_dim=3, name="emb"),
        sym.add_n(A, B, C), sym.ElementWiseSum(A, B), sym.add_n(A), sym.relu(sym.add_n(A, A, B)),
        sym.SoftmaxActivation(d), sym.SoftmaxActivation(d, mode="channel"),
        sym.LinearRegressionOutput(d, lbl, name="lin"), sym.MAERegressionOutput(d, name="mae"),
        sym.LogisticRegressionOutput(d, name="logit"), sym.MakeLoss(sym.sum(sym.square(d))),
        sym.make_loss(sym.mean(d, axis=1)),
    ]
    rows = np.clip(np.trunc(idx).astype(np.int64), 0, 5)
    x64 = x.astype(np.float64)
    refs = [w[rows], (a + b) + c, a + b, a, np.maximum((a + a) + b, 0),
            _softmax(x64, -1), _softmax(x64, 1),
            x, x, 1 / (1 + np.exp(-x64)), np.array([np.sum(x64 ** 2)]), x64.mean(axis=1)]
    shapes = {"idx": idx.shape, "x": x.shape, "a": a.shape, "b": b.shape, "c": c.shape, "label": x.shape}
    m = mxcc.compile(sym.Group(heads), shapes, {"emb_weight": w})
    assert {"label", "mae_label", "logit_label"} <= set(m.input_shapes)   # labels are inputs, optional here
    outs = m.forward(idx=idx, x=x, a=a, b=b, c=c)
    for i, (o, r) in enumerate(zip(outs, refs)):
        assert o.shape == r.shape, i
        assert rel_err(o, r) <= (2e-6 if i in (5, 6, 9, 10, 11) else 0), i


def test_shapes_and_kernels():
    d = sym.var("data")
    assert sym.Embedding(d, input_dim=10, output_dim=4, name="e").infer_shape(data=(2, 3))[0] == [(2, 3), (10, 4)]
    args, _, _ = sym.LinearRegressionOutput(d, name="l").infer_shape(data=(5, 1))
    assert args == [(5, 1), (5,)]                                  # MXNet: a 1-d label for (N, 1) data
    net = sym.relu(sym.LogisticRegressionOutput(sym.FullyConnected(d, num_hidden=3, name="fc"), name="lg"),
                   name="r")
    groups = inspect_network(net, {"data": (2, 4)}, CompileOptions())["groups"]
    assert [g["members"] for g in groups] == [["fc"], ["lg", "r"]]          # label is not read: not bound
    assert [i["shape"] for i in groups[1]["inputs"]] == [[2, 3]]
