"""The Symbol API against what MXNet 1.9.1 wrote and answered (tests/data/models/mlp, from mxnet-ref)."""
import json

import pytest

from mxcc_testing import DATA
from mxcc import sym
from mxcc.errors import AttrError, ShapeError, UnsupportedOpError


def cpp_example_mlp():
    """MXNet's cpp-package mlp_cpu.cpp network, with its variable names, auto-named ops."""
    X, label = sym.Variable("X"), sym.Variable("label")
    w = [sym.Variable(f"w{i}") for i in range(3)]
    b = [sym.Variable(f"b{i}") for i in range(3)]
    with sym.NameManager():
        h = X
        for i, n in enumerate((128, 64)):
            h = sym.Activation(sym.FullyConnected(h, w[i], b[i], num_hidden=n), act_type="relu")
        return sym.SoftmaxOutput(sym.FullyConnected(h, w[2], b[2], num_hidden=10), label)


def test_tojson_equals_the_json_mxnet_wrote():
    ref = json.loads((DATA / "models/mlp/mlp-symbol.json").read_text())
    assert json.loads(cpp_example_mlp().tojson()) == ref


def test_lists_and_infer_shape_answer_what_mxnet_answers():
    net = cpp_example_mlp()
    assert net.list_arguments() == ["X", "w0", "b0", "w1", "b1", "w2", "b2", "label"]
    assert net.list_outputs() == ["softmaxoutput0_output"]
    assert net.list_auxiliary_states() == []
    # MXNet 1.9.1: net.infer_shape(X=(4, 784))
    assert net.infer_shape(X=(4, 784)) == (
        [(4, 784), (128, 784), (128,), (64, 128), (64,), (10, 64), (10,), (4,)], [(4, 10)], [])
    assert net.infer_shape() == (None, None, None)     # incomplete: MXNet returns Nones too


def test_automatic_names_and_operators():
    with sym.NameManager():
        data = sym.var("data")
        fc = sym.FullyConnected(data, num_hidden=3)
        y = (1 - (fc + 1)) * fc / 2 - sym.Dropout(fc, p=0.1)
        g = sym.Group([y, sym.softmax(fc, axis=-1)])
    names = [n["name"] for n in json.loads(g.tojson())["nodes"]]
    assert names == ["data", "fullyconnected0_weight", "fullyconnected0_bias", "fullyconnected0",
                     "_plusscalar0", "_rminusscalar0", "_mul0", "_divscalar0", "dropout0", "_minus0", "softmax0"]
    ops = [n["op"] for n in json.loads(g.tojson())["nodes"]]
    assert ops[4:] == ["_plus_scalar", "_rminus_scalar", "elemwise_mul", "_div_scalar", "Dropout",
                       "elemwise_sub", "softmax"]
    assert g.list_outputs() == ["_minus0_output", "softmax0_output"]
    assert fc.list_arguments() == ["data", "fullyconnected0_weight", "fullyconnected0_bias"]


def test_save_and_load_round_trip(tmp_path):
    net = cpp_example_mlp()
    net.save(str(tmp_path / "mlp-symbol.json"))
    again = sym.load(str(tmp_path / "mlp-symbol.json"))
    assert again.tojson() == net.tojson()
    assert sym.load_json(net.tojson()).list_arguments() == net.list_arguments()


def test_variable_attributes():
    v = sym.Variable("w", shape=(3, 4), lr_mult=2.0, wd_mult=0.0, dtype="float32")
    node = json.loads(v.tojson())["nodes"][0]
    assert node["attrs"] == {"__shape__": "(3, 4)", "__lr_mult__": "2.0", "__wd_mult__": "0.0", "__dtype__": "0"}


def test_builder_errors_name_the_node():
    data = sym.var("data")
    with pytest.raises(AttrError, match=r"fc9 \(FullyConnected\): required attribute 'num_hidden'"):
        sym.FullyConnected(data, name="fc9")
    with pytest.raises(AttrError, match="act_type.*expected one of"):
        sym.Activation(data, act_type="swish", name="a")
    with pytest.raises(AttrError, match="unknown attribute 'bogus'"):
        sym.Activation(data, act_type="relu", bogus=1)
    fc = sym.FullyConnected(data, num_hidden=4, name="fc")
    with pytest.raises(ShapeError, match=r"fc \(FullyConnected\): input 'weight' has shape \(4, 5\), expected \(4, 7\)"):
        fc.infer_shape(data=(2, 7), fc_weight=(4, 5))
    with pytest.raises(UnsupportedOpError, match="Nope"):
        from mxcc.symbol import _make
        _make("Nope", [data], {}, None)
