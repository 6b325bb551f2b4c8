"""Bad input through the Python API: clear errors naming the node, the input and what was expected."""
import numpy as np
import pytest

import mxcc
from mxcc_testing import DATA, needs_gcc
from mxcc import sym
from mxcc.errors import GraphError, ParamsError, ShapeError, UnsupportedOpError

MLP = DATA / "models" / "mlp"


def test_unknown_operator_names_op_node_and_supported_list():
    text = (MLP / "mlp-symbol.json").read_text().replace('"op": "Activation"', '"op": "Swish"', 1)
    with pytest.raises(UnsupportedOpError) as e:
        mxcc.compile(text, {"X": (1, 784)})
    msg = str(e.value)
    assert msg.startswith("activation0 (Swish): operator 'Swish' is not supported")
    assert "supported: Activation, " in msg and "FullyConnected" in msg


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
    with pytest.raises(ParamsError, match="params not bound: b0"):
        m.forward(X=np.zeros((4, 784), np.float32))
    good = {f"arg:{k}": np.zeros(s, np.float32) for k, s in m.param_shapes.items()}
    with pytest.raises(ParamsError, match=r"missing params: w2 \(10, 64\)"):
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
    # a strided float32 input is accepted (copied); the label is optional
    x = rng.standard_normal((4, 1568)).astype(np.float32)[:, ::2]
    assert m.forward(X=x)[0].shape == (4, 10)


def test_graph_errors_from_the_api():
    with pytest.raises(GraphError, match="malformed JSON"):
        mxcc.compile('{"nodes": [}', {"x": (1,)})
    with pytest.raises(TypeError):
        mxcc.compile(42, {"x": (1,)})
