"""NumPy-mode operator names (ops/numpy_ops.py) against MXNet 1.9.1 in NumPy mode (tests/data/numpy_mode, made by
its gen.py from Gluon blocks written with F.np / F.npx, hybridized and exported).

Op cases: an inference build of every case side by side in one graph (node names prefixed `c<i>_`: one
compile), and a poisoning training build of all of them with grad_req 'write' on every input, backward with
MXNet's head gradients. Models: the NumPy-mode CNN (and the same JSON with its ops renamed to MXNet's `_npx_*`
aliases) and MLP, compiled from their exported JSON and V3 .params files. Acceptance as the references' README:
max|got - ref| <= 1e-5 * max|ref| for op outputs, gradients and the models' outputs.
The reshape table checks npx.reshape's and np.reshape's shape rules (and errors) against MXNet without
compiling; the refusals check that what the mapping cannot honour is an MxccError naming the node.
"""
import json
from dataclasses import replace

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import AttrError, ShapeError, UnsupportedOpError
from mxcc.graph import load_json
from mxcc.graph.ir import Graph
from mxcc.ops import REGISTRY, numpy_ops
from mxcc.ops.base import ShapeCtx
from mxcc_testing import DATA, SGD0, compile_for_gradients, needs_gcc, rel_err

REF = DATA / "numpy_mode"
MANIFEST = json.loads((REF / "manifest.json").read_text())
CASES = MANIFEST["cases"]
NAMES = list(CASES)
MODELS = MANIFEST["models"]


def _merged(names: list[str], lift_0d: bool = False) -> Graph:
    """Every case side by side, node names prefixed `c<i>_`. lift_0d: each 0-d output viewed as (1,) by one more
    `_npx_reshape` node (the Executor takes no 0-d head gradient: Module._coerce makes it (1,))."""
    from mxcc.graph.ir import Node, Ref
    nodes, heads, attrs = [], [], ()
    for i, name in enumerate(names):
        g = load_json(REF / CASES[name]["files"]["symbol"])
        base, pre = len(nodes), f"c{i}_"
        nodes += [replace(n, id=base + n.id, name=pre + n.name,
                          inputs=tuple(replace(r, node=base + r.node) for r in n.inputs),
                          control_deps=tuple(base + d for d in n.control_deps)) for n in g.nodes]
        for h, shape in zip(g.heads, CASES[name]["outputs"]):
            h = replace(h, node=base + h.node)
            if lift_0d and shape == []:
                nodes.append(Node(id=len(nodes), name=f"{pre}lift{h.node}", op="_npx_reshape",
                                  attrs=(("newshape", "(1,)"),), inputs=(h,)))
                h = Ref(len(nodes) - 1)
            heads.append(h)
        attrs = g.attrs
    return Graph(nodes=tuple(nodes), heads=tuple(heads), attrs=attrs)


def _by_case(names, outs):
    res, k = {}, 0
    for n in names:
        count = len(CASES[n]["outputs"])
        res[n] = outs[k:k + count]
        k += count
    return res


@pytest.fixture(scope="module")
def arrays():
    return {n: np.load(REF / CASES[n]["files"]["arrays"]) for n in NAMES}


@pytest.fixture(scope="module")
def inputs(arrays):
    return {f"c{i}_{k}": arrays[n][f"arg:{k}"] for i, n in enumerate(NAMES) for k in CASES[n]["arguments"]}


@pytest.fixture(scope="module")
def forward(inputs):
    m = mxcc.compile(_merged(NAMES), {k: v.shape for k, v in inputs.items()}, name="npmode")
    m.set_params({})          # runs <net>_prepare (the folded aranges)
    return _by_case(NAMES, m.forward(**inputs))


@pytest.fixture(scope="module")
def trained(inputs, arrays):
    exe = compile_for_gradients(_merged(NAMES, lift_0d=True), {k: v.shape for k, v in inputs.items()}, None,
                                optimizer=SGD0(), grad_req={k: "write" for k in inputs}, name="npmode")
    outs = [o.copy() for o in exe.forward(is_train=True, **inputs)]
    exe.backward([arrays[n][f"head_grad:{j}"].reshape(-1) if not CASES[n]["outputs"][j] else arrays[n][f"head_grad:{j}"]
                  for n in NAMES for j in range(len(CASES[n]["outputs"]))])
    grads = {n: {k: exe.grad_dict[f"c{i}_{k}"].copy() for k in CASES[n]["arguments"]} for i, n in enumerate(NAMES)}
    return _by_case(NAMES, outs), grads


# -- op cases vs MXNet ---------------------------------------------------------------------------------------------
@needs_gcc
@pytest.mark.parametrize("name", NAMES)
def test_forward_matches_mxnet(forward, arrays, name):
    for i, out in enumerate(forward[name]):
        ref = arrays[name][f"out:{i}"]
        assert out.shape == ref.shape, f"output {i}: shape {out.shape}, MXNet {ref.shape}"
        assert rel_err(out, ref) <= 1e-5, f"output {i}"


@needs_gcc
@pytest.mark.parametrize("name", NAMES)
def test_gradients_match_mxnet(trained, arrays, name):
    outs, grads = trained
    a = arrays[name]
    for i, out in enumerate(outs[name]):
        assert rel_err(out.reshape(a[f"out:{i}"].shape), a[f"out:{i}"]) <= 1e-5, f"output {i}"
    scale = max(float(np.abs(a[f"grad:{k}"]).max()) for k in grads[name]) or 1.0
    for k, g in grads[name].items():
        ref = a[f"grad:{k}"]
        assert g.shape == ref.shape
        if np.abs(ref).max() <= 1e-6 * scale:        # zero in MXNet (floor, sign, full_like's input): zero here
            assert np.abs(g).max() <= 1e-5 * scale, k
        else:
            assert rel_err(g, ref) <= 1e-5, k


def test_every_exported_op_is_mapped():
    """Each op the cases and models export, under the name MXNet wrote, is in the registry."""
    used = {op for c in [*CASES.values(), *MODELS.values()] for op, _ in c["ops"]}
    assert not sorted(op for op in used if op not in REGISTRY)
    assert {"_npi_add", "_np_sum", "_npx_reshape", "_np_transpose", "_npx_relu", "_npi_concatenate"} <= used


# -- models --------------------------------------------------------------------------------------------------------
@needs_gcc
@pytest.mark.parametrize("net", list(MODELS))
def test_model_matches_mxnet(net):
    rec = MODELS[net]
    a = np.load(REF / rec["files"]["arrays"])
    shapes = {k: tuple(v) for k, v in rec["inputs"].items()}
    m = mxcc.compile(REF / rec["files"]["symbol"], shapes, REF / rec["files"]["params"])   # V3 records
    outs = m.forward(**{k: a[f"input:{k}"] for k in shapes})
    assert len(outs) == len(rec["outputs"])
    for i, out in enumerate(outs):
        assert out.shape == a[f"out:{i}"].shape
        assert rel_err(out, a[f"out:{i}"]) <= 1e-5, f"output {i}"


def test_names_are_listed_by_supported_ops():
    """The operators of their own (renamed and translated) are public names; MXNet's aliases accepted spellings."""
    from mxcc.ops import supported_ops
    public, spellings = set(supported_ops()), set(supported_ops(aliases=True))
    own = {n for n, op in REGISTRY.items() if op.name == n and n.startswith(("_np_", "_npi_", "_npx_"))}
    assert set(numpy_ops.RENAMED) | {"_np_sum", "_npi_mean", "_np_max", "_np_min", "_np_transpose", "_np_moveaxis",
                                     "_np_reshape", "_npx_reshape", "_np_squeeze", "_npi_concatenate",
                                     "_npi_full_like", "_np_dot", "_npi_matmul"} == own
    assert own <= public
    assert set(numpy_ops.ALIASES) | set(numpy_ops.NP_ALIASES) <= spellings - public


def test_aliases_are_the_same_operator():
    """An MXNet alias is the canonical op's OpDef; the Symbol API writes MXNet's canonical name back."""
    for alias, canonical in numpy_ops.ALIASES.items():
        assert REGISTRY[alias] is REGISTRY[canonical], alias
    g = load_json(REF / MODELS["cnn_np_aliases"]["files"]["symbol"])
    assert {"_npx_convolution", "_npx_batch_norm", "_npx_pooling", "_npx_fully_connected"} <= {n.op for n in g.nodes}
    conv = sym._npx_convolution(sym.Variable("data"), kernel=(3, 3), num_filter=4, name="c")
    assert '"op": "Convolution"' in conv.tojson().replace("'", '"')
    relu = sym._npx_relu(sym.Variable("data"), name="r")           # an operator of its own: its own name
    assert '"op": "_npx_relu"' in relu.tojson().replace("'", '"')


# -- shape rules vs MXNet, without compiling ---------------------------------------------------------------------------
def _reshape_id(row):
    return f"{row['op']}-{row['newshape']}-{row['shape']}{'-rev' if row['reverse'] else ''}"


@pytest.mark.parametrize("row", MANIFEST["reshape_table"], ids=_reshape_id)
def test_reshape_codes_match_mxnet(row):
    shape, codes = tuple(row["shape"]), tuple(row["newshape"])
    ctx = ShapeCtx("r", row["op"], ("data",), [shape])
    if row["op"] == "_np_reshape":
        run = lambda: numpy_ops.np_reshape_shape(codes, shape, ctx)     # noqa: E731
    else:
        run = lambda: numpy_ops.npx_reshape_shape(codes, shape, row["reverse"], ctx)     # noqa: E731
    if "error" in row:
        with pytest.raises(ShapeError, match=r"r \(_np"):
            run()
    else:
        assert run() == tuple(row["out_shape"])


# -- refusals: an MxccError naming the node ----------------------------------------------------------------------------
def _infer(symbol, **shapes):
    from mxcc.passes import bind, infer_shapes
    return infer_shapes(bind(load_json(symbol.tojson())), shapes)


@pytest.mark.parametrize("build, shapes, error, match", [
    (lambda x: sym._np_sum(x, initial=2.0, name="s"), {"x": (2, 3)}, AttrError, r"s \(_np_sum\).*initial"),
    (lambda x: sym._np_sum(x, dtype="float16", name="s"), {"x": (2, 3)}, AttrError, r"s \(_np_sum\).*float16"),
    (lambda x: sym._np_max(x, initial=0.0, name="m"), {"x": (2, 3)}, AttrError, r"m \(_np_max\).*initial"),
    (lambda x: sym._np_reshape(x, newshape=(3, 2), order="F", name="r"), {"x": (2, 3)}, AttrError, r"C order"),
    (lambda x: sym._np_reshape(x, newshape=(-2, 3), name="r"), {"x": (2, 3)}, ShapeError, r"r \(_np_reshape\).*-1"),
    (lambda x: sym._npx_reshape(x, newshape=(-3, -2), name="r"), {"x": (2, 3)}, ShapeError, r"-3 drops"),
    (lambda x: sym._np_transpose(x, axes=(0, 0), name="t"), {"x": (2, 3)}, ShapeError, r"t \(_np_transpose\)"),
    (lambda x: sym._npi_matmul(x, sym.Variable("y"), name="mm"), {"x": (1, 3, 4), "y": (2, 4, 5)}, ShapeError,
     r"mm \(_npi_matmul\).*broadcast batch"),
    (lambda x: sym._np_dot(x, sym.Variable("y"), name="d"), {"x": (2, 3), "y": (2, 3, 4)}, ShapeError,
     r"d \(_np_dot\).*3\+ dims"),
    (lambda x: sym._np_squeeze(x, axis=(0,), name="q"), {"x": (2, 3)}, ShapeError, r"q \(_np_squeeze\)"),
    (lambda x: sym._npi_concatenate(x, sym.Variable("y"), num_args=2, axis=2, name="c"), {"x": (2, 3), "y": (2, 3)},
     ShapeError, r"c \(_npi_concatenate\)"),
])
def test_refusals_name_the_node(build, shapes, error, match):
    with pytest.raises(error, match=match):
        _infer(build(sym.Variable("x")), **shapes)


def test_unmapped_numpy_op_is_unsupported_by_name():
    js = json.loads(sym._np_sum(sym.Variable("x"), name="s").tojson())
    js["nodes"][1]["op"] = "_npi_std"
    with pytest.raises(UnsupportedOpError, match=r"s \(_npi_std\).*not supported"):
        load_json(json.dumps(js)).nodes[1].opdef      # noqa: B018
