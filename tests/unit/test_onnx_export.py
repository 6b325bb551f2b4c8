"""benchmarks/_onnx.py, the ONNX export the CNN/MLP benchmarks hand to ONNX Runtime: ORT's outputs on the exported
graph must equal MXNet's own (goldens) and mxcc's. Skipped without onnx/onnxruntime (benchmark-only extras)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import mxcc  # noqa: E402
from mxcc import sym  # noqa: E402
from mxcc.params import load_params, split_arg_aux  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _onnx import ort_session, to_onnx, typed_graph  # noqa: E402

MODELS = ROOT / "tests" / "data" / "models"


def _rel(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("net", ["lenet", "mobilenet0.25", "resnet18_v1_slim", "squeezenet1.1"])
def test_exported_network_matches_mxnet(net):
    # MXNet 1.9.1's own weights and outputs: covers Conv (depthwise too), BatchNorm with real moving statistics,
    # max/avg/global pooling incl. 'full' convention, Concat, elemwise_add, Dropout, FC, SoftmaxOutput
    io = np.load(MODELS / net / f"{net}-io.npz")
    arg, aux = split_arg_aux(load_params(MODELS / net / f"{net}-0000.params"))
    model = to_onnx(typed_graph(MODELS / net / f"{net}-symbol.json", {"data": io["input"].shape}), {**arg, **aux})
    out = ort_session(model, 1).run(None, {"data": io["input"]})[0]
    assert out.shape == io["output"].shape
    assert _rel(out, io["output"]) < 1e-4


def _odd_net():
    """The mappings the reference networks do not use."""
    x = sym.Variable("data")
    c = sym.Convolution(data=x, kernel=(3, 3), num_filter=8, num_group=2, dilate=(2, 2), pad=(1, 2), no_bias=True,
                        name="gconv")
    b = sym.BatchNorm(data=c, fix_gamma=False, eps=1e-5, name="bn")
    b = sym.BatchNorm(data=b, name="bn_fixed")        # MXNet's default fix_gamma=True: gamma read as 1
    a = sym.LeakyReLU(data=b, act_type="leaky", slope=0.1, name="leaky")
    p1 = sym.Pooling(data=a, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg", count_include_pad=False,
                     name="avgpool")
    p2 = sym.Pooling(data=a, kernel=(2, 2), stride=(2, 2), pool_type="max", pooling_convention="full",
                     name="maxpool")
    s = sym.elemwise_add(p1, sym.clip(sym.Activation(data=p2, act_type="tanh", name="tanh"), a_min=-0.5, a_max=0.6,
                                      name="relu6ish"), name="add")
    cat = sym.Concat(s, sym.Dropout(data=s, p=0.3, name="drop"), dim=1, num_args=2, name="cat")
    r = sym.Reshape(data=cat, shape=(0, 16, -1), name="reshape")
    fc = sym.FullyConnected(data=r, num_hidden=5, flatten=False, name="fc3d")
    g = sym.Pooling(data=cat, global_pool=True, kernel=(1, 1), pool_type="max", name="gmax")
    fc2 = sym.FullyConnected(data=g, num_hidden=6, name="fc")
    return sym.Group([sym.softmax(data=fc, axis=1, name="sm"), fc2])


def test_odd_mappings_match_mxcc(rng):
    net = _odd_net()
    shape = (2, 4, 9, 11)
    g = typed_graph(net, {"data": shape})
    params = {n.name: rng.standard_normal(n.out_types[0].shape).astype(np.float32)
              for n in g.variables if n.name != "data"}
    for bn in ("bn", "bn_fixed"):
        params[f"{bn}_moving_var"] = rng.uniform(0.5, 2.0, params[f"{bn}_moving_var"].shape).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    outs = ort_session(to_onnx(g, params), 1).run(None, {"data": x})
    aux = ("bn_moving_mean", "bn_moving_var", "bn_fixed_moving_mean", "bn_fixed_moving_var")
    mod = mxcc.compile(net, {"data": shape}, {("aux:" + k if k in aux else k): v for k, v in params.items()})
    for got, ref in zip(mod.forward(data=x), outs):
        assert got.shape == ref.shape
        assert _rel(got, ref) < 1e-5


def test_unmapped_op_names_the_node():
    net = sym.LRN(data=sym.Variable("data"), nsize=3, name="my_lrn")
    with pytest.raises(NotImplementedError, match="LRN.*my_lrn"):
        to_onnx(typed_graph(net, {"data": (1, 4, 5, 5)}), {})
