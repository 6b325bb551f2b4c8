"""Extra MXNet 1.9.1 references (tests/data/mxnet_extra, made by its gen_extra.py): repeated graph outputs and
SoftmaxActivation on 1-D to 5-D data, forward (inference build) and gradients (training build).

Acceptance as the references' README: max|got - ref| <= 1e-5 * max|ref|. `grad:<name>` is the true gradient
(the manifest's `grad_reference` says how MXNet made it); where MXNet 1.9.1's own backward is not the
derivative of its forward (a repeated output's head gradients: its executor keeps only the last; the
instance-mode SoftmaxActivation on 3+ dims) its result is kept as `mxnet_grad:<name>` and not used here.
"""
import json
from dataclasses import replace

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.graph import load_json
from mxcc.graph.ir import Graph
from mxcc.passes import bind, copy_repeated_heads, infer_shapes
from mxcc_testing import DATA, SGD0, needs_gcc, rel_err

pytestmark = needs_gcc

EXTRA = DATA / "mxnet_extra"
MANIFEST = json.loads((EXTRA / "manifest.json").read_text())["cases"]
REPEATS = [n for n in MANIFEST if n.startswith("repeat_")]
SOFTMAX = [n for n in MANIFEST if n.startswith("SoftmaxActivation_")]


def _case(name):
    case = MANIFEST[name]
    a = np.load(EXTRA / case["files"]["arrays"])
    shapes = {k: tuple(case["arguments"][k]) for k in case["inputs"]}
    params = {k[4:]: a[k] for k in a.files if k.startswith("arg:") and k[4:] not in shapes}
    inputs = {k: a[f"arg:{k}"] for k in shapes}
    heads = [a[k] for k in sorted(f for f in a.files if f.startswith("head_grad:"))] or None
    return case, a, shapes, params, inputs, heads


def _check_outputs(outs, a, n):
    assert len(outs) == n
    for i, out in enumerate(outs):
        assert rel_err(out, a[f"out:{i}"]) <= 1e-5, f"output {i}"


def _check_grads(grad_dict, a):
    names = [f[5:] for f in a.files if f.startswith("grad:")]
    assert names
    for var in names:
        assert rel_err(grad_dict[var], a[f"grad:{var}"]) <= 1e-5, var


# -- repeated outputs ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", REPEATS)
def test_repeated_outputs_forward(name):
    case, a, shapes, params, inputs, _ = _case(name)
    m = mxcc.compile(EXTRA / case["files"]["symbol"], shapes, params)
    outs = m.forward(**inputs)
    _check_outputs(outs, a, len(case["outputs"]))
    assert len({id(o) for o in outs}) == len(outs)
    outs = [o.copy() for o in outs]
    again = m.forward(**{k: v * 0.5 for k, v in inputs.items()})      # every slot rewritten, none stale
    assert all(not np.array_equal(o, p) for o, p in zip(again, outs) if np.abs(p).max() > 0)


@pytest.mark.parametrize("name", [n for n in REPEATS if MANIFEST[n]["grad_req"]])
def test_repeated_outputs_gradients(name):
    """Each output's head gradients summed over its repeats (a repeated loss head: none, counted once)."""
    case, a, shapes, params, inputs, heads = _case(name)
    exe = mxcc.compile(EXTRA / case["files"]["symbol"], shapes, params, train=True, optimizer=SGD0(),
                       inputs_need_grad=True)
    _check_outputs(exe.forward(is_train=True, **inputs), a, len(case["outputs"]))
    exe.backward(heads)
    _check_grads(exe.grad_dict, a)
    if heads is not None:           # MXNet's executor keeps the last repeat's head gradient only: not that
        assert rel_err(a["mxnet_grad:data"], a["grad:data"]) > 1e-3


def test_repeated_outputs_of_a_training_build_forward_in_inference_mode():
    """Group([y, Dropout(y)]): a training build's inference forward (Dropout is the identity: one value)."""
    case, a, shapes, params, inputs, _ = _case("repeat_dropout_infer")
    exe = mxcc.compile(EXTRA / case["files"]["symbol"], shapes, params, train=True, optimizer=SGD0())
    _check_outputs(exe.forward(is_train=False, **inputs), a, 2)
    exe.forward(is_train=True, **inputs)
    _check_outputs(exe.forward(is_train=False, **inputs), a, 2)


def test_copy_repeated_heads_gives_each_repeat_a_copy():
    with sym.NameManager():
        y = sym.relu(sym.var("data"), name="y")
        net = sym.Group([y, sym.var("data"), y, sym.tanh(y, name="t"), y, sym.var("data")])
    g = copy_repeated_heads(infer_shapes(bind(net.graph), {"data": (2, 3)}))
    assert [g.output_name(h) for h in g.heads] == ["y_output", "data", "y_copy1_output", "t_output",
                                                   "y_copy2_output", "data"]    # variables: left to the compiler
    assert [g.nodes[h.node].op for h in g.heads] == ["relu", "null", "_copy", "tanh", "_copy", "null"]
    assert all(g.nodes[h.node].inputs[0] == g.heads[0] for h in (g.heads[2], g.heads[4]))
    assert copy_repeated_heads(g) is g


def test_repeated_output_of_a_multi_output_node():
    """A repeated second output (SliceChannel's output1) and a repeated Flatten (a view that is a head)."""
    x = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    with sym.NameManager():
        d = sym.var("data")
        parts = sym.SliceChannel(d, num_outputs=2, axis=1, name="sl")
        f = sym.Flatten(d, name="fl")
        net = sym.Group([parts[1], f, parts[1], f, parts[0]])
    outs = mxcc.compile(net, {"data": x.shape}).forward(data=x)
    refs = [x[:, 2:], x.reshape(2, -1), x[:, 2:], x.reshape(2, -1), x[:, :2]]
    for o, r in zip(outs, refs):
        np.testing.assert_array_equal(o, r)


# -- SoftmaxActivation: one graph holding every case (node names prefixed c<i>_) --------------------------
def _merged(names: list[str]) -> Graph:
    nodes, heads, attrs = [], [], ()
    for i, name in enumerate(names):
        g = load_json(EXTRA / MANIFEST[name]["files"]["symbol"])
        base, pre = len(nodes), f"c{i}_"
        nodes += [replace(n, id=base + n.id, name=pre + n.name,
                          inputs=tuple(replace(r, node=base + r.node) for r in n.inputs)) for n in g.nodes]
        heads += [replace(h, node=base + h.node) for h in g.heads]
        attrs = g.attrs
    return Graph(nodes=tuple(nodes), heads=tuple(heads), attrs=attrs)


def _softmax_inputs(names):
    arrays = {n: np.load(EXTRA / MANIFEST[n]["files"]["arrays"]) for n in names}
    return arrays, {f"c{i}_data": arrays[n]["arg:data"] for i, n in enumerate(names)}


def test_softmax_activation_forward():
    arrays, inputs = _softmax_inputs(SOFTMAX)
    m = mxcc.compile(_merged(SOFTMAX), {k: v.shape for k, v in inputs.items()}, name="sa")
    for name, out in zip(SOFTMAX, m.forward(**inputs)):
        assert rel_err(out, arrays[name]["out:0"]) <= 1e-5, name


def test_softmax_activation_gradients():
    names = [n for n in SOFTMAX if MANIFEST[n]["grad_req"]]         # 1-D: MXNet has no backward to compare
    arrays, inputs = _softmax_inputs(names)
    exe = mxcc.compile(_merged(names), {k: v.shape for k, v in inputs.items()}, train=True, optimizer=SGD0(),
                       inputs_need_grad=True, name="sa")
    for name, out in zip(names, exe.forward(is_train=True, **inputs)):
        assert rel_err(out, arrays[name]["out:0"]) <= 1e-5, name
    exe.backward([arrays[n]["head_grad:0"] for n in names])
    for i, name in enumerate(names):
        assert rel_err(exe.grad_dict[f"c{i}_data"], arrays[name]["grad:data"]) <= 1e-5, name


# -- the public op list --------------------------------------------------------------------------------------
def test_every_public_op_name_is_an_mxnet_operator():
    """supported_ops (and the UnsupportedOpError list) name MXNet's operators only, never mxcc's internal ones."""
    from mxcc.ops import REGISTRY, is_internal, supported_ops
    mxnet_ops = set(json.loads((EXTRA / "mxnet_ops.json").read_text())["operators"])
    assert not [n for n in supported_ops(aliases=True) if n not in mxnet_ops]
    assert {n for n in REGISTRY if is_internal(n)} >= {"_reshape_to", "_zeros_like", "_backward_FullyConnected",
                                                         "_train_BatchNorm"}
