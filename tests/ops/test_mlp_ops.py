"""The skeleton's operators compiled to C, against numpy float64 references.

Tolerances: float32 GEMM with FMA contraction over K terms: max error <= 1e-6 * sqrt(K) of the output scale;
elementwise/softmax: a few float32 ulps (2e-6 relative) since expf/tanhf differ from numpy by <= 1-2 ulp.
"""
import numpy as np
import pytest

import mxcc
from mxcc_testing import needs_gcc, rel_err
from mxcc import sym

pytestmark = needs_gcc


def _np_act(x, t):
    return {"relu": lambda v: np.maximum(v, 0), "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh,
            "softrelu": lambda v: np.log1p(np.exp(v)), "softsign": lambda v: v / (1 + np.abs(v))}[t](x)


def _softmax(x, axis, t=1.0, log=False):
    z = x / t
    z = z - z.max(axis=axis, keepdims=True)
    if log:
        return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape, hidden, flatten, no_bias, act", [
    ((1, 5), 3, True, False, None),
    ((7, 3, 4), 13, True, False, "relu"),
    ((2, 3, 5), 4, False, False, "sigmoid"),
    ((4, 17), 6, True, True, "tanh"),
    ((65, 300), 130, True, False, "softrelu"),
    ((3, 31), 37, True, False, "softsign"),
])
def test_fully_connected_with_fused_activation(shape, hidden, flatten, no_bias, act, rng):
    data = sym.var("data")
    net = sym.FullyConnected(data, num_hidden=hidden, flatten=flatten, no_bias=no_bias, name="fc")
    if act:
        net = sym.Activation(net, act_type=act, name="act")
    k = int(np.prod(shape[1:])) if flatten else shape[-1]
    x = rng.standard_normal(shape).astype(np.float32)
    params = {"fc_weight": rng.standard_normal((hidden, k)).astype(np.float32) / np.sqrt(k)}
    if not no_bias:
        params["fc_bias"] = rng.standard_normal(hidden).astype(np.float32)
    ref = (x.reshape(shape[0], -1) if flatten else x).astype(np.float64) @ params["fc_weight"].T.astype(np.float64)
    if not no_bias:
        ref = ref + params["fc_bias"]
    if act:
        ref = _np_act(ref, act)
    for fuse in (True, False):
        m = mxcc.compile(net, {"data": shape}, params, fuse=fuse)
        out = m.forward(data=x)[0]
        assert out.shape == ref.shape
        assert rel_err(out, ref) <= 1e-6 * np.sqrt(k) + 2e-7


@pytest.mark.parametrize("op, kw, log", [
    ("softmax", {}, False), ("softmax", {"axis": 0}, False), ("softmax", {"axis": 1, "temperature": 2.5}, False),
    ("log_softmax", {}, True), ("log_softmax", {"axis": 1}, True),
])
def test_softmax_family(op, kw, log, rng):
    x = (rng.standard_normal((3, 5, 4)) * 4).astype(np.float32)
    m = mxcc.compile(getattr(sym, op)(sym.var("data"), **kw), {"data": x.shape})
    ref = _softmax(x.astype(np.float64), kw.get("axis", -1), kw.get("temperature", 1.0), log)
    assert rel_err(m.forward(data=x)[0], ref) <= 2e-6


@pytest.mark.parametrize("kw, shape, axis", [
    ({}, (4, 10), 1), ({}, (2, 3, 4), None), ({"multi_output": True}, (2, 3, 4), 1),
    ({"preserve_shape": True}, (2, 3, 4), 2),
])
def test_softmax_output_inference(kw, shape, axis, rng):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    m = mxcc.compile(sym.SoftmaxOutput(sym.var("data"), name="so", **kw), {"data": shape})
    assert "so_label" in m.input_shapes          # present but optional at inference
    x64 = x.astype(np.float64)
    ref = _softmax(x64.reshape(shape[0], -1), 1).reshape(shape) if axis is None else _softmax(x64, axis)
    assert rel_err(m.forward(data=x)[0], ref) <= 2e-6


def test_activation_types_unfused(rng):
    x = (rng.standard_normal((5, 9)) * 5).astype(np.float32)
    data = sym.var("data")
    acts = ["relu", "sigmoid", "tanh", "softrelu", "softsign"]
    net = sym.Group([sym.Activation(data, act_type=a) for a in acts])
    outs = mxcc.compile(net, {"data": x.shape}).forward(data=x)
    for a, o in zip(acts, outs):
        assert rel_err(o, _np_act(x.astype(np.float64), a)) <= 2e-6, a


def test_elementwise_chain_fused_and_unfused(rng):
    a, b, c = (sym.var(n) for n in "abc")
    net = sym.relu(((a + b) * c - 2) / 3 + sym.exp(sym.negative(sym.abs(c))) - sym.square(a) + 1.5)
    shape = (6, 50, 130)      # > PARALLEL_MIN_ELEMENTS: the OpenMP loop runs
    xs = {n: rng.standard_normal(shape).astype(np.float32) for n in "abc"}
    A, B, C = (xs[n].astype(np.float64) for n in "abc")
    ref = np.maximum(((A + B) * C - 2) / 3 + np.exp(-np.abs(C)) - A * A + 1.5, 0)
    for fuse in (True, False):
        m = mxcc.compile(net, {n: shape for n in "abc"}, fuse=fuse)
        assert rel_err(m.forward(**xs)[0], ref) <= 4e-6


def test_scalar_ops_and_sqrt_log(rng):
    x = rng.uniform(0.5, 4, (3, 7)).astype(np.float32)
    d = sym.var("data")
    net = sym.Group([d + 2, d - 2, 2 - d, d * 2, d / 2, 2 / d, sym.sqrt(d), sym.log(d), sym.sigmoid(d),
                     sym.tanh(d), sym.softsign(d)])
    x64 = x.astype(np.float64)
    refs = [x64 + 2, x64 - 2, 2 - x64, x64 * 2, x64 / 2, 2 / x64, np.sqrt(x64), np.log(x64),
            1 / (1 + np.exp(-x64)), np.tanh(x64), x64 / (1 + x64)]
    for o, r in zip(mxcc.compile(net, {"data": x.shape}).forward(data=x), refs):
        assert rel_err(o, r) <= 2e-6


def test_flatten_view_dropout_removed_and_view_output(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    d = sym.var("data")
    net = sym.Group([sym.Flatten(d), sym.relu(sym.Dropout(sym.Flatten(d), p=0.5))])
    outs = mxcc.compile(net, {"data": x.shape}).forward(data=x)
    np.testing.assert_array_equal(outs[0], x.reshape(2, 12))
    np.testing.assert_array_equal(outs[1], np.maximum(x.reshape(2, 12), 0))   # Dropout: identity at inference


def test_threads_1_and_2_agree(rng):
    x = rng.standard_normal((64, 784)).astype(np.float32)
    net = sym.FullyConnected(sym.var("data"), num_hidden=128, name="fc")
    params = {"fc_weight": rng.standard_normal((128, 784)).astype(np.float32) * 0.03,
              "fc_bias": rng.standard_normal(128).astype(np.float32)}
    ref = x.astype(np.float64) @ params["fc_weight"].T.astype(np.float64) + params["fc_bias"]
    for t in (1, 2):
        m = mxcc.compile(net, {"data": x.shape}, params, threads=t)
        assert rel_err(m.forward(data=x)[0], ref) <= 1e-6 * np.sqrt(784)


def test_fc_with_residual_add_and_activation_fused_into_the_epilogue(rng):
    d, r = sym.var("data"), sym.var("res")
    fc = sym.FullyConnected(d, num_hidden=24, name="fc")
    net = sym.tanh(fc + r)          # residual epilogue, then an activation
    x = rng.standard_normal((5, 11)).astype(np.float32)
    res = rng.standard_normal((5, 24)).astype(np.float32)
    params = {"fc_weight": rng.standard_normal((24, 11)).astype(np.float32),
              "fc_bias": rng.standard_normal(24).astype(np.float32)}
    ref = np.tanh(x.astype(np.float64) @ params["fc_weight"].T + params["fc_bias"] + res)
    fused = mxcc.compile(net, {"data": x.shape, "res": res.shape}, params, out_dir=None)
    from mxcc.compiler.driver import inspect_network
    from mxcc.options import CompileOptions
    plan = inspect_network(net, {"data": x.shape, "res": res.shape}, CompileOptions())
    assert [g["ops"] for g in plan["groups"]] == [["FullyConnected", "elemwise_add", "tanh"]]
    for m in (fused, mxcc.compile(net, {"data": x.shape, "res": res.shape}, params, fuse=False)):
        assert rel_err(m.forward(data=x, res=res)[0], ref) <= 1e-6 * np.sqrt(11) + 2e-7
