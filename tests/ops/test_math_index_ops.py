"""Math, indexing and shape operators of issue 22 part A (ops/math_ops.py, index_ops.py, tile_ops.py) against
MXNet 1.9.1 references (tests/data/ops_extra_a, made by its gen.py with MXNet's native kernels).

Forward: an inference build of every case side by side in one graph (node names prefixed `c<i>_`: one compile).
Gradients: a poisoning training build of every case with inputs, grad_req 'write' on every input (indices and
conditions included: MXNet gives them zero gradients), forward(is_train=True) + backward(head_grad:*).
Acceptance as the references' README: max|got - ref| <= 1e-5 * max|ref| (NaN and inf where the reference
has them); a gradient that is zero in MXNet must be zero here up to 1e-5 of the case's largest gradient.
Cast is exact: every output and gradient bit-equal (it only converts).
The slice and shape tables check the shape rules (and slice's positions) against MXNet without compiling.
"""
import json
from dataclasses import replace

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import AttrError, MxccError, ShapeError
from mxcc.files import cpuinfo
from mxcc.graph import load_json
from mxcc.graph.ir import Graph
from mxcc.ops import math_ops, supported_ops
from mxcc.ops.base import ShapeCtx
from mxcc.ops.index_ops import SliceAttrs, slice_ranges
from mxcc_testing import DATA, SGD0, compile_for_gradients, needs_gcc, rel_err

REF = DATA / "ops_extra_a"
MANIFEST = json.loads((REF / "manifest.json").read_text())
CASES = MANIFEST["cases"]
MAIN = [n for n, c in CASES.items() if c["group"] == "main"]
CAST = [n for n, c in CASES.items() if c["group"] == "cast"]


def _zero_gradient(name: str) -> bool:
    """Every gradient MXNet gives the case is zero (sign, round, one_hot...): no backward node reads the head
    gradient, so the executor takes no out_grad for it (see test_zero_gradients_are_zeros)."""
    a = np.load(REF / CASES[name]["files"]["arrays"])
    return all(not a[f].any() for f in a.files if f.startswith("grad:"))


TRAINED = [n for n in MAIN if CASES[n]["backward"] and not _zero_gradient(n)]
ZERO_GRAD = [n for n in MAIN if CASES[n]["backward"] and _zero_gradient(n)]

NEW_OPS = ["sign", "reciprocal", "log1p", "expm1", "erf", "floor", "ceil", "round", "rsqrt", "hard_sigmoid",
           "_power", "_power_scalar", "_rpower_scalar", "_maximum", "_minimum", "_maximum_scalar", "_minimum_scalar",
           "broadcast_power", "where", "broadcast_to", "broadcast_like", "slice", "_arange", "_contrib_arange_like",
           "take", "one_hot", "pick", "stack", "tile", "repeat", "reshape_like", "slice_like"]


def _merged(names: list[str]) -> Graph:
    nodes, heads, attrs = [], [], ()
    for i, name in enumerate(names):
        g = load_json(REF / CASES[name]["files"]["symbol"])
        base, pre = len(nodes), f"c{i}_"
        nodes += [replace(n, id=base + n.id, name=pre + n.name,
                          inputs=tuple(replace(r, node=base + r.node) for r in n.inputs),
                          control_deps=tuple(base + d for d in n.control_deps)) for n in g.nodes]
        heads += [replace(h, node=base + h.node) for h in g.heads]
        attrs = g.attrs
    return Graph(nodes=tuple(nodes), heads=tuple(heads), attrs=attrs)


def _arrays(names):
    arrays = {n: np.load(REF / CASES[n]["files"]["arrays"]) for n in names}
    inputs = {f"c{i}_{k}": arrays[n][f"arg:{k}"] for i, n in enumerate(names) for k in CASES[n]["arguments"]}
    return arrays, inputs


def _outputs_by_case(names, outs, arrays):
    res, k = {}, 0
    for n in names:
        count = len([f for f in arrays[n].files if f.startswith("out:")])
        res[n] = outs[k:k + count]
        k += count
    return res


def _run(names, train: bool):
    """{case: (outputs, grads by argument)} of one build holding every case of `names`."""
    arrays, inputs = _arrays(names)
    shapes = {k: v.shape for k, v in inputs.items()}
    if not train:
        m = mxcc.compile(_merged(names), shapes, name="opsa")
        m.set_params({})          # NOTE: runs <net>_prepare (folded _arange); see test_folded_arange_without_params
        outs = m.forward(**inputs)
        return arrays, {n: (o, {}) for n, o in _outputs_by_case(names, outs, arrays).items()}
    grad_req = {k: "write" for k in inputs}
    exe = compile_for_gradients(_merged(names), shapes, None, optimizer=SGD0(), grad_req=grad_req, name="opsa")
    outs = [o.copy() for o in exe.forward(is_train=True, **inputs)]
    exe.backward([arrays[n][f"head_grad:{j}"] for n in names for j in range(len(CASES[n]["outputs"]))])
    by_case = _outputs_by_case(names, outs, arrays)
    return arrays, {n: (by_case[n], {k: exe.grad_dict[f"c{i}_{k}"].copy() for k in CASES[n]["arguments"]})
                    for i, n in enumerate(names)}


def _close(got, ref, tol=1e-5):
    """rel_err <= tol over the finite reference values; NaN and inf exactly where the reference has them."""
    assert got.shape == ref.shape
    special = ~np.isfinite(ref)
    np.testing.assert_array_equal(got[special], ref[special])
    if (~special).any():
        assert rel_err(got[~special], ref[~special]) <= tol


@pytest.fixture(scope="module")
def forward_main():
    return _run(MAIN, train=False)


@pytest.fixture(scope="module")
def backward_main():
    return _run(TRAINED, train=True)


@pytest.fixture(scope="module")
def cast_results():
    return _run(CAST, train=False), _run(CAST, train=True)


# -- outputs and gradients vs MXNet ---------------------------------------------------------------------------
@needs_gcc
@pytest.mark.parametrize("name", MAIN)
def test_forward_matches_mxnet(forward_main, name):
    arrays, res = forward_main
    outs, _ = res[name]
    for i, out in enumerate(outs):
        _close(out, arrays[name][f"out:{i}"])


@needs_gcc
@pytest.mark.parametrize("name", TRAINED)
def test_gradients_match_mxnet(backward_main, name):
    arrays, res = backward_main
    a = arrays[name]
    outs, grads = res[name]
    for i, out in enumerate(outs):
        _close(out, a[f"out:{i}"])
    scale = max(float(np.abs(a[f"grad:{k}"]).max()) for k in grads) or 1.0
    for k, g in grads.items():
        ref = a[f"grad:{k}"]
        if np.abs(ref).max() <= 1e-6 * scale:        # zero in MXNet (indices, conditions, floor...): zero here
            assert np.abs(g).max() <= 1e-5 * scale, k
        else:
            assert rel_err(g, ref) <= 1e-5, k


@pytest.mark.parametrize("name", ZERO_GRAD)
def test_zero_gradients_are_zeros(name):
    """MXNet's gradient is zero for every input (MakeZeroGradNodes): autodiff gives each a `_zeros_like`."""
    from mxcc.passes import bind, infer_shapes
    from mxcc.passes.autodiff import autodiff
    shapes = {k: tuple(v) for k, v in CASES[name]["arguments"].items()}
    g = autodiff(infer_shapes(bind(load_json(REF / CASES[name]["files"]["symbol"])), shapes), list(shapes))
    assert [g.nodes[r.node].op for _, r in g.grads] == ["_zeros_like"] * len(shapes)


@needs_gcc
@pytest.mark.parametrize("name", CAST)
def test_cast_is_exact(cast_results, name):
    (arrays, forward), (_, trained) = cast_results
    a = arrays[name]
    np.testing.assert_array_equal(forward[name][0][0], a["out:0"])
    np.testing.assert_array_equal(trained[name][0][0], a["out:0"])
    np.testing.assert_array_equal(trained[name][1]["data"], a["grad:data"])


@needs_gcc
@pytest.mark.skipif("avx512f" not in cpuinfo().get("flags", "").split(), reason="the build needs AVX-512 to run")
def test_cast_is_exact_with_512_bit_vectors():
    """An x86-64-v4 build vectorizes with 512-bit registers on every AVX-512 CPU (-march=native does only where GCC
    tunes for them, as on AMD Zen 4): there GCC 12.2 once compiled bfloat16's NaN test, a float select, to an
    unmasked copy of one element of the 42-element loop's tail."""
    arrays, inputs = _arrays(CAST)
    m = mxcc.compile(_merged(CAST), {k: v.shape for k, v in inputs.items()}, name="opsa", isa="x86-64-v4")
    m.set_params({})
    for name, outs in _outputs_by_case(CAST, m.forward(**inputs), arrays).items():
        np.testing.assert_array_equal(outs[0], arrays[name]["out:0"], err_msg=name)


def test_cast_value_twin_matches_mxnet():
    """The Python twin (one_hot's on/off constants) gives MXNet's Cast values for every special value."""
    for name in CAST:
        a = np.load(REF / CASES[name]["files"]["arrays"])
        dtype = json.loads((REF / CASES[name]["files"]["symbol"]).read_text())["nodes"][1]["attrs"]["dtype"]
        if name == "cast_chain":
            continue
        got = np.array([math_ops.cast_value(v, dtype) for v in a["arg:data"].ravel()], np.float32)
        np.testing.assert_array_equal(got, a["out:0"].ravel(), err_msg=name)


# -- shape rules vs MXNet ----------------------------------------------------------------------------------------
def _slice_id(row):
    return f"{row['shape']}-{row['begin']}-{row['end']}-{row['step']}"


@pytest.mark.parametrize("row", MANIFEST["slice_table"], ids=_slice_id)
def test_slice_ranges_match_mxnet(row):
    """Output shape and the positions picked, for MXNet's None/negative/out-of-range begin, end and step."""
    attrs = SliceAttrs(tuple(row["begin"]), tuple(row["end"]), tuple(row["step"]))
    shape = tuple(row["shape"])
    ctx = ShapeCtx("s", "slice", ("data",), [shape])
    if "error" in row or 0 in row["out_shape"]:         # MXNet 1.9 allows 0-sized results; mxcc refuses them
        with pytest.raises(ShapeError, match="^s \\(slice\\): "):
            slice_ranges(attrs, shape, ctx)
        return
    ranges = slice_ranges(attrs, shape, ctx)
    assert [c for _, _, c in ranges] == row["out_shape"]
    picked = np.arange(np.prod(shape)).reshape(shape)[np.ix_(*[np.arange(b, b + s * c, s) for b, s, c in ranges])]
    assert picked.ravel().tolist() == row["picked"]


def _shape_id(row):
    node = json.loads(row["symbol"])["nodes"][-1]
    return f"{node['op']}-{node.get('attrs', {})}-{row['shapes']}"


@pytest.mark.parametrize("row", MANIFEST["shape_table"], ids=_shape_id)
def test_shape_rules_match_mxnet(row):
    """MXNet's output shape, or an MxccError where MXNet fails (or would give a 0-sized tensor)."""
    net = sym.load_json(row["symbol"])
    shapes = {k: tuple(v) for k, v in row["shapes"].items()}
    if "error" in row or any(0 in s for s in row["out_shapes"]):
        with pytest.raises(MxccError):
            _, outs, _ = net.infer_shape(**shapes)
            assert outs is not None                  # incomplete is not an answer either
        return
    assert [list(s) for s in net.infer_shape(**shapes)[1]] == row["out_shapes"]


# -- the rest of the contract ---------------------------------------------------------------------------------------
def test_new_ops_are_listed_and_have_builders():
    listed = set(supported_ops())
    assert not [op for op in NEW_OPS if op not in listed]
    assert {"_Power", "_Maximum", "_MinimumScalar", "crop"} <= set(supported_ops(aliases=True))
    assert all(callable(getattr(sym, op)) for op in NEW_OPS)
    assert sym.tile(sym.var("d"), reps=(2, 1)).infer_shape(d=(3, 4))[1] == [(6, 4)]


@pytest.mark.parametrize("build, error, msg", [
    (lambda d: sym.slice(d, begin=(0,), end=(0,), name="n"), ShapeError, r"^n \(slice\): .*empty"),
    (lambda d: sym.slice(d, begin=(0, 0, 0), end=(1, 1, 1), name="n"), ShapeError, "more than the 2 dimensions"),
    (lambda d: sym.take(d, sym.var("i"), axis=2, name="n"), ShapeError, r"^n \(take\): axis 2 is out of range"),
    (lambda d: sym.load_json(sym.pick(d, sym.var("i"), axis=0, name="n").tojson()
                             .replace('"axis": "0"', '"axis": "None"')),
     AttrError, r"^n \(pick\): axis=None is not supported"),
    (lambda d: sym.repeat(d, repeats=0, name="n"), AttrError, "repeats must be positive"),
    (lambda d: sym.tile(d, reps=(0,), name="n"), ShapeError, "reps"),
    (lambda d: sym.broadcast_to(d, shape=(5, 3), name="n"), ShapeError, r"^n \(broadcast_to\): "),
    (lambda d: sym.Cast(d, dtype="int16", name="n"), AttrError, "expected one of"),
    (lambda d: sym._arange(start=2, stop=1, name="n"), ShapeError, r"^n \(_arange\): invalid range"),
    (lambda d: sym._arange(start=0, stop=4, dtype="int8", name="n"), AttrError, "dtype=int8 is not supported"),
    (lambda d: sym.where(sym.var("c"), d, d, name="n"), ShapeError, r"^n \(where\): condition"),
])
def test_errors_name_the_node(build, error, msg):
    shapes = dict(d=(2, 3), i=(2,), c=(3,))
    with pytest.raises(error, match=msg):
        net = build(sym.var("d"))
        net.infer_shape(**{k: v for k, v in shapes.items() if k in net.list_arguments()})


@needs_gcc
def test_folded_arange_without_params():
    """A network with no params computes its folded constants when it is loaded (no set_params to wait for)."""
    d = sym.var("d")
    m = mxcc.compile(sym.broadcast_add(d, sym._arange(start=3, name="ar")), {"d": (3,)})
    np.testing.assert_array_equal(m.forward(d=np.zeros(3, np.float32))[0], [0, 1, 2])


@needs_gcc
def test_arange_alone_runs_without_inputs_and_folds_as_a_constant():
    """A head computed from no input at all; and an inference build computes a non-head _arange at bind time.
    (mxcc.compile needs at least one input shape: the graph has an unrelated input.)"""
    d = sym.var("d")
    net = sym.Group([sym._arange(start=2, stop=-1, step=-0.5, repeat=2, name="ar"), sym.relu(d)])
    m = mxcc.compile(net, {"d": (2,)})
    out = m.forward(d=np.ones(2, np.float32))[0]
    np.testing.assert_array_equal(out, np.repeat(np.arange(2, -1, -0.5, dtype=np.float32), 2))
    from mxcc.passes import bind, fold_constants, infer_shapes
    from mxcc.passes.fold_constants import folded_nodes
    net = sym.broadcast_mul(sym.var("d"), sym._arange(start=4, name="ar"))
    assert folded_nodes(fold_constants(infer_shapes(bind(net.graph), {"d": (2, 4)}))) == ["ar"]


@needs_gcc
def test_parallel_kernels_match_numpy(rng):
    """Shapes big enough for the OpenMP paths (the MXNet cases are small), against numpy's gathers and scatters:
    take/pick/one_hot, slice, tile, where, and pick's and take's gradients (repeated indices add up)."""
    x = rng.standard_normal((64, 40, 16)).astype(np.float32)
    idx = rng.integers(-3, 45, size=(60,)).astype(np.float32)
    cond = (rng.random((64, 40, 16)) > 0.5).astype(np.float32)
    e = rng.standard_normal((16, 3, 4096)).astype(np.float32)
    eidx = rng.integers(-5, 5, size=(16, 4096)).astype(np.float32)
    d, i, p, c = sym.var("d"), sym.var("i"), sym.var("p"), sym.var("c")
    net = sym.Group([sym.take(d, i, axis=1), sym.pick(sym.var("e"), p, axis=1, mode="wrap"), sym.one_hot(i, depth=600),
                     sym.slice(d, begin=(None, -1), end=(None, None), step=(2, -3)), sym.tile(d, reps=(1, 2, 1)),
                     sym.where(c, d, -d)])
    outs = mxcc.compile(net, {"d": x.shape, "i": idx.shape, "p": eidx.shape, "c": cond.shape, "e": e.shape}).forward(
        d=x, i=idx, p=eidx, c=cond, e=e)
    j = np.clip(idx.astype(int), 0, 39)
    refs = [x[:, j], np.take_along_axis(e, eidx.astype(int)[:, None] % 3, 1)[:, 0],
            np.where((idx[:, None] >= 0) & (idx[:, None] < 600) & (np.arange(600) == idx[:, None]), 1.0, 0.0),
            x[::2, ::-3], np.tile(x, (1, 2, 1)), np.where(cond != 0, x, -x)]
    for o, r in zip(outs, refs):
        np.testing.assert_array_equal(o, r)
    exe = mxcc.compile(sym.pick(sym.take(sym.var("a"), i, axis=1), sym.var("q"), axis=2), {"a": x.shape, "i": idx.shape,
                       "q": (64, 60)}, train=True, optimizer=SGD0(), grad_req={"a": "write", "i": "null", "q": "null"})
    q = rng.integers(0, 16, size=(64, 60)).astype(np.float32)
    head = rng.standard_normal((64, 60)).astype(np.float32)
    picked = np.take_along_axis(x[:, j], q.astype(int)[..., None], 2)[..., 0]
    np.testing.assert_array_equal(exe.forward(a=x, i=idx, q=q)[0], picked)
    exe.backward([head])
    taken = np.zeros((64, 60, 16))
    np.put_along_axis(taken, q.astype(int)[..., None], head[..., None], 2)
    want = np.zeros(x.shape)
    np.add.at(want, (slice(None), j), taken)
    assert rel_err(exe.grad_dict["a"], want) <= 1e-6
