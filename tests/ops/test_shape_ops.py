"""Reshape (every special-code example of MXNet's documentation, and more), transpose, expand_dims, squeeze,
identity/_copy, BlockGrad and Cast: shape rules, compiled outputs vs numpy, views, and errors.

Expected shapes are written out from MXNet's Reshape documentation (independent of mxcc's rule).
Tolerance: exact equality; these ops move data and compute nothing.
"""
import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.compiler.driver import inspect_network
from mxcc.errors import AttrError, ShapeError
from mxcc.options import CompileOptions
from mxcc_testing import needs_gcc

# (input shape, shape codes, reverse, result): MXNet's docs first, then more code combinations
RESHAPE_CASES = [
    ((2, 3, 4), (4, 0, 2), False, (4, 3, 2)),
    ((2, 3, 4), (2, 0, 0), False, (2, 3, 4)),
    ((2, 3, 4), (6, 1, -1), False, (6, 1, 4)),
    ((2, 3, 4), (3, -1, 8), False, (3, 1, 8)),
    ((2, 3, 4), (-1,), False, (24,)),
    ((2, 3, 4), (-2,), False, (2, 3, 4)),
    ((2, 3, 4), (2, -2), False, (2, 3, 4)),
    ((2, 3, 4), (-2, 1, 1), False, (2, 3, 4, 1, 1)),
    ((2, 3, 4), (-3, 4), False, (6, 4)),
    ((2, 3, 4, 5), (-3, -3), False, (6, 20)),
    ((2, 3, 4), (0, -3), False, (2, 12)),
    ((2, 3, 4), (-3, -2), False, (6, 4)),
    ((2, 3, 4), (-4, 1, 2, -2), False, (1, 2, 3, 4)),
    ((2, 3, 4), (2, -4, -1, 3, -2), False, (2, 1, 3, 4)),
    ((10, 5, 4), (-1, 0), False, (40, 5)),
    ((10, 5, 4), (-1, 0), True, (50, 4)),
    ((2, 3, 4, 5), (0, -4, 3, 1, -3), False, (2, 3, 1, 20)),
    ((6, 4), (-4, 2, -1, 0), False, (2, 3, 4)),
    ((6, 4), (-4, -1, 3, -2), False, (2, 3, 4)),
    ((2, 3, 4), (-3, -1), False, (6, 4)),
    ((2, 3, 4), (-1, -2), False, (2, 3, 4)),
    ((2, 3, 4), (0, -1), True, (3, 8)),
    ((2, 3, 4), (-2, -3), True, (2, 12)),
    ((2, 3), (0, 0, 1, 1), False, (2, 3, 1, 1)),
    ((7,), (1, -1, 1), False, (1, 7, 1)),
]


@pytest.mark.parametrize("x, codes, reverse, want", RESHAPE_CASES)
def test_reshape_shape_rule(x, codes, reverse, want):
    _, outs, _ = sym.Reshape(sym.var("data"), shape=codes, reverse=reverse).infer_shape(data=x)
    assert outs == [want]


def test_reshape_legacy_target_shape():
    d = sym.var("data")
    assert sym.Reshape(d, target_shape=(0, 4)).infer_shape(data=(2, 3, 4))[1] == [(6, 4)]
    assert sym.Reshape(d, target_shape=(9, 0, 3), keep_highest=True).infer_shape(data=(2, 3, 4))[1] == [(2, 4, 3)]


@needs_gcc
def test_reshape_all_cases_compiled_in_one_network(rng):
    shapes = sorted({c[0] for c in RESHAPE_CASES})
    xs = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    var = {s: f"x{i}" for i, s in enumerate(shapes)}
    syms = {s: sym.var(name) for s, name in var.items()}
    net = sym.Group([sym.Reshape(syms[x], shape=codes, reverse=rev) for x, codes, rev, _ in RESHAPE_CASES])
    outs = mxcc.compile(net, {k: v.shape for k, v in xs.items()}).forward(**xs)
    for o, (x, _, _, want) in zip(outs, RESHAPE_CASES):
        np.testing.assert_array_equal(o, xs[var[x]].reshape(want))


BAD_RESHAPES = [                          # (input shape, codes, reverse, what the message says)
    ((2, 3, 4), (-1, -1), False, "only one dimension"),
    ((5,), (-3,), False, "-3 needs two"),
    ((2, 3), (0, 0, 0), False, "no input dimension left"),
    ((2, 3, 4), (-4, 1), False, "followed by the two sizes"),
    ((2, 3, 4), (-4, -1, -1, -2), False, "both be -1"),
    ((2, 3, 4), (-4, 2, 2, -2), False, "cannot split dimension 2"),
    ((2, 3, 4), (5, -1), False, "do not divide"),
    ((2, 3, 4), (-5,), False, "unknown code -5"),
    ((2, 3, 4), (4, 4), False, "has 16 elements, the input 24"),
    ((2, 3, 4), (-4, 1, 2, -1), False, "-1 after a -2/-4"),        # MXNet writes past its shape buffer
    ((2, 3, 4), (-2, -1), False, "-1 after a -2/-4"),              # MXNet infers the wrong dimension
    ((2, 3, 4), (-4, 1, 2, -2), True, "followed by the two sizes"),
    ((2, 3, 4), (), False, "non-empty `shape`"),
]


@pytest.mark.parametrize("x, codes, reverse, msg", BAD_RESHAPES)
def test_bad_reshape_codes_raise_shape_error_naming_the_node(x, codes, reverse, msg):
    net = sym.Reshape(sym.var("data"), shape=codes, reverse=reverse, name="rs7")
    with pytest.raises(ShapeError, match=msg) as e:
        net.infer_shape(data=x)
    assert str(e.value).startswith("rs7 (Reshape): ") and e.value.node == "rs7"


TRANSPOSES = [((2, 3, 4), ()), ((2, 3, 4, 5), (0, 2, 3, 1)), ((2, 3, 4, 5), (0, 3, 1, 2)), ((5, 7), (1, 0)),
              ((2, 3, 4), (-1, 0, -2)), ((3, 1, 4, 1), (2, 1, 3, 0)), ((64, 24, 33), (2, 0, 1))]


@needs_gcc
def test_transpose_expand_squeeze_compiled(rng):
    ins = {f"t{i}": rng.standard_normal(s).astype(np.float32) for i, (s, _) in enumerate(TRANSPOSES)}
    heads = [sym.transpose(sym.var(f"t{i}"), axes=ax) for i, (_, ax) in enumerate(TRANSPOSES)]
    refs = [np.transpose(ins[f"t{i}"], ax or None) for i, (_, ax) in enumerate(TRANSPOSES)]
    y = rng.standard_normal((2, 1, 3, 1)).astype(np.float32)
    ins["y"] = y
    v = sym.var("y")
    for kw, ref in [(dict(axis=None), y.reshape(2, 3)), (dict(axis=(1,)), y.reshape(2, 3, 1)),
                    (dict(axis=(-1, 1)), y.reshape(2, 3))]:
        heads.append(sym.squeeze(v, **{k: val for k, val in kw.items() if val is not None}))
        refs.append(ref)
    for ax in (0, 2, 4, -1, -5):
        heads.append(sym.expand_dims(v, axis=ax))
        refs.append(np.expand_dims(y, ax))
    outs = mxcc.compile(sym.Group(heads), {k: a.shape for k, a in ins.items()}).forward(**ins)
    for o, r in zip(outs, refs):
        assert o.shape == r.shape
        np.testing.assert_array_equal(o, r)


def test_squeeze_all_ones_gives_shape_1():
    assert sym.squeeze(sym.var("d")).infer_shape(d=(1, 1, 1))[1] == [(1,)]


def _kernels(net, **shapes):
    return inspect_network(net, shapes, CompileOptions())


@needs_gcc
def test_views_cost_no_kernel_and_become_copies_only_as_outputs(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    d = sym.var("data")
    chain = sym.Cast(sym.BlockGrad(sym.identity(sym.squeeze(sym.expand_dims(
        sym.Reshape(d, shape=(0, -1), name="r1"), axis=1, name="e1"), axis=1, name="s1"), name="i1"),
        name="b1"), dtype="float32", name="c1")
    relu = sym.relu(chain, name="relu")
    v_of_head = sym.Reshape(relu, shape=(-1,), name="r2")          # a view of another graph output
    v_of_input = sym._copy(d, name="cp")                             # a view of a graph input
    view_head = sym.Reshape(sym.stop_gradient(chain, name="sg"), shape=(4, 6), name="r3")  # view of views
    net = sym.Group([relu, v_of_head, v_of_input, view_head])
    info = _kernels(net, data=x.shape)
    assert [g["members"] for g in info["groups"]] == [["relu"], ["r2"], ["cp"], ["r3"]]   # no kernel for r1..c1
    assert [g["ops"] for g in info["groups"]][1:] == [["Reshape"], ["_copy"], ["Reshape"]]
    outs = mxcc.compile(net, {"data": x.shape}).forward(data=x)
    relu_ref = np.maximum(x.reshape(2, 12), 0)
    for o, r in zip(outs, [relu_ref, relu_ref.reshape(-1), x, x.reshape(4, 6)]):
        np.testing.assert_array_equal(o, r)


def test_views_are_free_inside_a_network():
    d = sym.var("data")
    net = sym.relu(sym.Reshape(sym.transpose(d, name="tr"), shape=(-1,), name="r"), name="relu")
    assert [g["members"] for g in _kernels(net, data=(2, 3))["groups"]] == [["tr"], ["relu"]]


def test_cast_to_float32_is_a_view_and_other_dtypes_a_kernel():
    d = sym.var("d")
    assert [g["members"] for g in _kernels(sym.relu(sym.Cast(d, dtype="float32", name="c"), name="r"),
                                          d=(2, 3))["groups"]] == [["r"]]
    assert [g["members"] for g in _kernels(sym.relu(sym.Cast(d, dtype="int32", name="c"), name="r"),
                                          d=(2, 3))["groups"]] == [["c"], ["r"]]
    with pytest.raises(AttrError, match="expected one of"):
        sym.Cast(d, dtype="float128", name="c")


@pytest.mark.parametrize("build, msg", [
    (lambda d: sym.transpose(d, axes=(0, 1)), "must list all 3"),
    (lambda d: sym.transpose(d, axes=(0, 1, 1)), "not a permutation"),
    (lambda d: sym.transpose(d, axes=(0, 1, 3)), "out of range"),
    (lambda d: sym.squeeze(d, axis=(1,)), "cannot squeeze axis 1: its size is 3"),
    (lambda d: sym.squeeze(d, axis=(0, -3)), "given twice"),
    (lambda d: sym.expand_dims(d, axis=4), "axis 4 is out of range"),
    (lambda d: sym.expand_dims(d, axis=-5), "out of range"),
])
def test_shape_op_errors(build, msg):
    with pytest.raises(ShapeError, match=msg):
        build(sym.var("d")).infer_shape(d=(1, 3, 4))
