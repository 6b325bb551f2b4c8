"""Bad input through the Python API: clear errors naming the node, the input and what was expected."""
import numpy as np
import pytest

import mxcc
from mxcc_testing import DATA, needs_gcc
from mxcc import sym
from mxcc.errors import GraphError, ParamsError, ShapeError, UnsupportedOpError, name_list
from mxcc.ops import supported_ops

MLP = DATA / "models" / "mlp"


def test_unknown_operator_names_op_node_and_supported_list():
    text = (MLP / "mlp-symbol.json").read_text().replace('"op": "Activation"', '"op": "Swish"', 1)
    with pytest.raises(UnsupportedOpError) as e:
        mxcc.compile(text, {"X": (1, 784)})
    msg = str(e.value)
    assert msg.startswith("activation0 (Swish): operator 'Swish' is not supported")
    n = len(supported_ops())
    assert "supported: Activation, BatchNorm, " in msg and f", … ({n} in all)" in msg
    assert msg.count(",") < 12                              # a short list; the full one is on the error
    assert e.value.names == tuple(supported_ops()) and "FullyConnected" in e.value.names


def test_unknown_operator_suggests_close_names_and_lists_public_ops_only():
    text = (MLP / "mlp-symbol.json").read_text().replace('"op": "Activation"', '"op": "Activaton"', 1)
    with pytest.raises(UnsupportedOpError, match=r"did you mean 'Activation'\? supported: Activation, "):
        mxcc.compile(text, {"X": (1, 784)})
    public = supported_ops()
    assert not [n for n in public if n.startswith(("_backward_", "_train_")) or n in ("_reshape_to", "_zeros_like")]
    assert {"FullyConnected", "Convolution", "SoftmaxOutput", "elemwise_add", "_copy"} <= set(public)
    assert "_Plus" in supported_ops(aliases=True) and "_Plus" not in public    # an alias of elemwise_add


def test_name_list_shortens_long_lists_and_the_error_keeps_them_all():
    assert name_list([]) == ""
    assert name_list(["a", "b"]) == "a, b"
    assert name_list(list("abcdefgh")) == "a, b, c, d, e, f, g, h"
    names = [f"p{i}" for i in range(102)]
    assert name_list(names) == "p0, p1, p2, p3, p4, p5, p6, p7, … (102 in all)"
    assert name_list(names, limit=2) == "p0, p1, … (102 in all)"
    err = ParamsError(f"params not bound: {name_list(names)}", names=names)
    assert err.names == tuple(names) and str(err).endswith("(102 in all)")
    assert ShapeError("x").names == ()


def test_wrong_input_name_is_a_neutral_message_naming_the_graph_variables():
    d = DATA / "models" / "resnet18_v1_slim" / "resnet18_v1_slim-symbol.json"
    with pytest.raises(ShapeError) as e:
        mxcc.compile(d, {"input": (1, 3, 224, 224)})
    msg = str(e.value)
    assert "--shape" not in msg
    assert msg.startswith("a shape was given for 'input', which is not an input or parameter of the graph "
                          "(its variables: data, ")
    assert msg.endswith(f", … ({len(e.value.names)} in all))") and len(e.value.names) > 100
    assert e.value.names[0] == "data" and e.value.input == "input"


def test_missing_input_shape_names_the_variable():
    with pytest.raises(ShapeError, match=r"variable 'X'.*--shape X="):
        mxcc.compile(MLP / "mlp-symbol.json", {"label": (4,)})


def test_shape_mismatch_inside_the_graph():
    a, b = sym.var("a"), sym.var("b")
    with sym.NameManager():         # fresh automatic names: the sum is `_plus0`
        total = a + b
    with pytest.raises(ShapeError, match=r"_plus0 \(elemwise_add\): input 'rhs' has shape \(2, 4\), expected \(2, 3\)"):
        mxcc.compile(total, {"a": (2, 3), "b": (2, 4)})


@needs_gcc
def test_wrong_params_and_wrong_forward_inputs(rng):
    m = mxcc.compile(MLP / "mlp-symbol.json", {"X": (4, 784)})
    with pytest.raises(ParamsError, match="params not bound: w0, b0"):
        m.forward(X=np.zeros((4, 784), np.float32))
    good = {f"arg:{k}": np.zeros(s, np.float32) for k, s in m.param_shapes.items()}
    with pytest.raises(ParamsError, match=r"missing.*: w2 \(10, 64\)"):
        m.set_params({k: v for k, v in good.items() if k != "arg:w2"})
    with pytest.raises(ParamsError, match=r"param 'w1' has shape \(64, 127\), expected \(64, 128\)"):
        m.set_params({**good, "arg:w1": np.zeros((64, 127), np.float32)})
    with pytest.raises(ParamsError, match="unexpected params.*extra"):
        m.set_params({**good, "arg:extra": np.zeros(3, np.float32)})
    m.set_params(good)
    with pytest.raises(ShapeError, match=r"input 'X' has shape \(4, 783\), expected \(4, 784\)"):
        m.forward(X=np.zeros((4, 783), np.float32))
    with pytest.raises(ShapeError, match="dtype float64, expected float32"):
        m.forward(X=np.zeros((4, 784)))
    with pytest.raises(ShapeError, match="missing input 'X'"):
        m.forward()
    with pytest.raises(ShapeError, match="unknown input"):
        m.forward(X=np.zeros((4, 784), np.float32), Y=1)
    with pytest.raises(ShapeError, match=r"unknown input\(s\) 'x'; the network's inputs are X"):
        m.forward(x=np.zeros((4, 784), np.float32))     # the unknown name, not "missing input 'X'"
    # a strided float32 input is accepted (copied); the label is optional
    x = rng.standard_normal((4, 1568)).astype(np.float32)[:, ::2]
    assert m.forward(X=x)[0].shape == (4, 10)


def test_long_name_lists_are_shortened_with_the_full_list_on_the_error():
    net = sym.var("data")
    for i in range(12):
        net = sym.FullyConnected(net, num_hidden=3, name=f"fc{i}")
    m = mxcc.compile(net, {"data": (1, 3)})
    with pytest.raises(ParamsError) as e:
        m.forward(data=np.zeros((1, 3), np.float32))
    assert "24 params not bound: fc0_weight, fc0_bias," in str(e.value) and "… (24 in all)" in str(e.value)
    assert len(str(e.value)) < 200 and len(e.value.names) == 24 and "fc11_bias" in e.value.names


def test_integer_inputs_are_converted_when_float32_holds_them(rng):
    """Embedding indices and labels are integers in user code (MXNet copies them into float32 NDArrays)."""
    with sym.NameManager():
        net = sym.Embedding(sym.var("data"), input_dim=50, output_dim=4, name="emb")
    w = rng.standard_normal((50, 4)).astype(np.float32)
    m = mxcc.compile(net, {"data": (2, 3)}, {"emb_weight": w})
    idx = rng.integers(0, 50, (2, 3))
    for dtype in (np.int64, np.int32, np.uint8):
        np.testing.assert_array_equal(m.forward(data=idx.astype(dtype))[0], w[idx])
    np.testing.assert_array_equal(m.forward(data=idx.astype(np.float32))[0], w[idx])
    with pytest.raises(ShapeError, match="float32 cannot hold"):
        m.forward(data=np.full((2, 3), 2 ** 30, np.int64))


def test_graph_errors_from_the_api():
    with pytest.raises(GraphError, match="malformed JSON"):
        mxcc.compile('{"nodes": [}', {"x": (1,)})
    with pytest.raises(TypeError):
        mxcc.compile(42, {"x": (1,)})
