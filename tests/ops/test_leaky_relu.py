"""LeakyReLU (leaky, prelu per channel and scalar, elu, selu, gelu, rrelu at inference) and clip vs numpy
float64 references, alone, in fused elementwise chains, and absorbed into a GEMM epilogue.

Tolerances: leaky/prelu/clip select or scale once: exact up to one rounding (rel 1e-7). elu/selu/gelu call
expm1f/erff (<= 1-2 ulp from the float64 functions) and then scale: rel 2e-6. Behind a GEMM the K-term
dot products add FMA-contraction error: rel 1e-6 * sqrt(K).
"""
import math

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.compiler.driver import inspect_network
from mxcc.errors import ShapeError
from mxcc.options import CompileOptions
from mxcc_testing import needs_gcc, rel_err

SELU_ALPHA, SELU_LAMBDA = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
_erf = np.vectorize(math.erf)


def _ref(x, act, slope=0.25, lower_bound=0.125, upper_bound=0.334, gamma=None):
    x = x.astype(np.float64)
    if act == "leaky":
        return np.where(x > 0, x, slope * x)
    if act == "prelu":
        g = gamma.reshape((1, -1) + (1,) * (x.ndim - 2)) if gamma.size > 1 else gamma.reshape(())
        return np.where(x > 0, x, g * x)
    if act == "elu":
        return np.where(x > 0, x, slope * np.expm1(x))
    if act == "selu":
        return SELU_LAMBDA * np.where(x > 0, x, SELU_ALPHA * np.expm1(x))
    if act == "gelu":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if act == "rrelu":
        return np.where(x > 0, x, (lower_bound + upper_bound) / 2 * x)
    raise ValueError(act)


@needs_gcc
def test_all_act_types_in_one_network(rng):
    x = (rng.standard_normal((2, 3, 4, 5)) * 3).astype(np.float32)
    g3 = rng.uniform(0.05, 0.5, 3).astype(np.float32)
    g1 = np.array([0.3], np.float32)
    d = sym.var("data")
    cases = [("leaky", {}), ("leaky", dict(slope=0.1)), ("elu", {}), ("elu", dict(slope=0.5)), ("selu", {}),
             ("gelu", {}), ("rrelu", dict(lower_bound=0.1, upper_bound=0.3))]
    heads = [sym.LeakyReLU(d, act_type=t, **kw)[0] for t, kw in cases]
    refs = [_ref(x, t, **kw) for t, kw in cases]
    rr = sym.LeakyReLU(d, act_type="rrelu", name="rr")
    heads.append(rr[1])                                            # mxcc fills the mask with the slope
    refs.append(np.full(x.shape, 0.125 / 2 + 0.334 / 2))
    scalar_gamma = sym.var("p1_gamma", shape=(1,))                # a (1,) gamma: given by the variable's shape
    heads += [sym.LeakyReLU(d, act_type="prelu", name="p3"),
              sym.LeakyReLU(d, scalar_gamma, act_type="prelu", name="p1")]
    refs += [_ref(x, "prelu", gamma=g3), _ref(x, "prelu", gamma=g1)]
    for lo, hi in [(-0.5, 0.5), (0.0, 6.0), (-1.0, 2.0)]:
        heads.append(sym.clip(d, a_min=lo, a_max=hi))
        refs.append(np.clip(x.astype(np.float64), lo, hi))
    m = mxcc.compile(sym.Group(heads), {"data": x.shape}, {"p3_gamma": g3, "p1_gamma": g1})
    for i, (o, r) in enumerate(zip(m.forward(data=x), refs)):
        assert o.shape == r.shape
        assert rel_err(o, r) <= 2e-6, i


def _groups(net, **shapes):
    return [g["members"] for g in inspect_network(net, shapes, CompileOptions())["groups"]]


@needs_gcc
@pytest.mark.parametrize("tail", ["leaky", "clip"])
def test_leaky_and_clip_run_in_the_gemm_epilogue(tail, rng):
    k = 50
    x = rng.standard_normal((6, k)).astype(np.float32)
    w = (rng.standard_normal((7, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    fc = sym.FullyConnected(sym.var("data"), num_hidden=7, name="fc")
    net = (sym.LeakyReLU(fc, slope=0.2, name="act") if tail == "leaky"
           else sym.clip(fc, a_min=-0.3, a_max=0.6, name="act"))
    assert _groups(net, data=x.shape) == [["fc", "act"]]
    y = x.astype(np.float64) @ w.T.astype(np.float64) + b
    ref = np.where(y > 0, y, 0.2 * y) if tail == "leaky" else np.clip(y, -0.3, 0.6)
    out = mxcc.compile(net, {"data": x.shape}, {"fc_weight": w, "fc_bias": b}).forward(data=x)[0]
    assert rel_err(out, ref) <= 1e-6 * np.sqrt(k)


def test_only_leaky_fuses_into_an_anchor_but_all_elementwise_types_chain():
    fc = sym.FullyConnected(sym.var("data"), num_hidden=4, name="fc")
    assert _groups(sym.LeakyReLU(fc, act_type="elu", name="e"), data=(2, 3)) == [["fc"], ["e"]]
    chain = sym.LeakyReLU(sym.LeakyReLU(sym.relu(sym.var("x"), name="r"), act_type="gelu", name="g"),
                          act_type="selu", name="s")
    assert _groups(chain, x=(2, 3)) == [["r", "g", "s"]]
    prelu = sym.LeakyReLU(sym.relu(sym.var("x"), name="r"), act_type="prelu", name="p")
    assert _groups(prelu, x=(2, 3)) == [["r"], ["p"]]                      # BROADCAST: no elementwise chain


@needs_gcc
def test_elementwise_chain_with_gelu_and_clip_fused(rng):
    x = (rng.standard_normal((3, 40)) * 2).astype(np.float32)
    net = sym.clip(sym.LeakyReLU(sym.var("data") * 2, act_type="gelu"), a_min=-0.1, a_max=2.0)
    ref = np.clip(_ref(x * 2.0, "gelu"), -0.1, 2.0)
    assert rel_err(mxcc.compile(net, {"data": x.shape}).forward(data=x)[0], ref) <= 2e-6


def test_prelu_gamma_shape_rules():
    d = sym.var("data")
    arg_shapes, _, _ = sym.LeakyReLU(d, act_type="prelu", name="p").infer_shape(data=(2, 5, 3))
    assert arg_shapes == [(2, 5, 3), (5,)]
    with pytest.raises(ShapeError, match=r"p \(LeakyReLU\): input 'gamma' has shape \(4,\)"):
        sym.LeakyReLU(d, act_type="prelu", name="p").infer_shape(data=(2, 5, 3), p_gamma=(4,))
    assert sym.LeakyReLU(d, act_type="rrelu").list_outputs()[1].endswith("_mask")
