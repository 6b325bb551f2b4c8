"""BatchNorm (inference) compiled to C against the float64 formula
(x - moving_mean) / sqrt(moving_var + eps) * gamma + beta, gamma := 1 under fix_gamma (MXNet's default),
per channel of `axis` (1, -1, 0; 2-D, 3-D and 4-D data), eps default 1e-3; output_mean_var's extra outputs;
moving stats as aux states; shapes against MXNet's cases.

Tolerance: a handful of float32 operations per element (subtract, multiply, add; invstd from sqrtf):
4 ulps of the output scale, 5e-7 of max|ref|.
"""
import json

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import AttrError, ShapeError
from mxcc_testing import DATA, needs_gcc, rel_err

CASES = {   # name -> (input, attrs)
    "bn_default": ("x4", {}),
    "bn_gamma": ("x4", dict(fix_gamma=False, eps=1e-5, momentum=0.8)),
    "bn_global": ("x4", dict(fix_gamma=False, use_global_stats=True)),
    "bn_2d": ("x2", dict(fix_gamma=False)),
    "bn_last": ("x3", dict(fix_gamma=False, axis=-1)),
    "bn_axis0": ("x3", dict(axis=0, eps=0.1)),
}
SHAPES = {"x4": (3, 5, 7, 9), "x2": (4, 6), "x3": (2, 3, 5)}


def bn_ref(x, gamma, beta, mean, var, eps=1e-3, fix_gamma=True, axis=1, **_):
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    g = np.ones_like(gamma) if fix_gamma else gamma
    r = lambda v: v.astype(np.float64).reshape(shape)   # noqa: E731
    return (x.astype(np.float64) - r(mean)) / np.sqrt(r(var) + eps) * r(g) + r(beta)


def _stats(rng, c):
    return dict(gamma=rng.uniform(0.5, 2, c), beta=rng.standard_normal(c), moving_mean=rng.standard_normal(c) * 2,
                moving_var=rng.uniform(0.1, 3, c))


@needs_gcc
def test_batch_norms_match_numpy(rng):
    xs = {k: (rng.standard_normal((s)) * 3 + 1).astype(np.float32) for k, s in SHAPES.items()}
    ins = {k: sym.var(k) for k in SHAPES}
    net = sym.Group([sym.BatchNorm(ins[inp], name=name, **at) for name, (inp, at) in CASES.items()])
    assert net.list_auxiliary_states() == [f"{n}_{s}" for n in CASES for s in ("moving_mean", "moving_var")]
    params, refs = {}, {}
    for name, (inp, at) in CASES.items():
        x = xs[inp]
        st = {k: v.astype(np.float32) for k, v in _stats(rng, x.shape[at.get("axis", 1)]).items()}
        params.update({f"{name}_{k}": v for k, v in st.items()})
        refs[name] = bn_ref(x, st["gamma"], st["beta"], st["moving_mean"], st["moving_var"], **at)
    m = mxcc.compile(net, {k: v.shape for k, v in xs.items()}, params)
    for (name, ref), out in zip(refs.items(), m.forward(**xs)):
        assert out.shape == ref.shape, name
        assert rel_err(out, ref) <= 5e-7, name


@needs_gcc
def test_output_mean_var_outputs_what_mxnet_returns_at_inference(rng):
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    net = sym.BatchNorm(sym.var("data"), fix_gamma=False, output_mean_var=True, eps=1e-4, name="bn")
    assert net.list_outputs() == ["bn_output", "bn_mean", "bn_var"]
    st = {f"bn_{k}": v.astype(np.float32) for k, v in _stats(rng, 4).items()}
    y, mean, invstd = mxcc.compile(net, {"data": x.shape}, st).forward(data=x)
    assert rel_err(y, bn_ref(x, st["bn_gamma"], st["bn_beta"], st["bn_moving_mean"], st["bn_moving_var"],
                             eps=1e-4, fix_gamma=False)) <= 5e-7
    np.testing.assert_array_equal(mean, st["bn_moving_mean"])
    assert rel_err(invstd, 1 / np.sqrt(st["bn_moving_var"].astype(np.float64) + 1e-4)) <= 2e-7


def test_three_outputs_two_hidden_in_json_and_symbol():
    bn = sym.BatchNorm(sym.var("data"), name="bn")
    assert bn.list_outputs() == ["bn_output"]
    assert bn.list_arguments() == ["data", "bn_gamma", "bn_beta"]
    row_ptr = json.loads(bn.tojson())["node_row_ptr"]
    assert row_ptr[-1] - row_ptr[-2] == 3
    assert bn.infer_shape(data=(2, 3, 4, 4)) == ([(2, 3, 4, 4), (3,), (3,)], [(2, 3, 4, 4)], [(3,), (3,)])


MANIFEST = json.loads((DATA / "ops" / "manifest.json").read_text())["cases"]


@pytest.mark.parametrize("case", [c for c, v in MANIFEST.items() if v["op"] == "BatchNorm"])
def test_shape_rule_answers_what_mxnet_answered(case):
    info = MANIFEST[case]
    net = sym.load(str(DATA / "ops" / "cases" / f"{case}-symbol.json"))
    args, outs, aux = net.infer_shape(data=tuple(info["arguments"]["data"]))
    assert dict(zip(net.list_arguments(), map(list, args))) == info["arguments"]
    assert dict(zip(net.list_auxiliary_states(), map(list, aux))) == info["aux_states"]
    assert [list(s) for s in outs] == list(info["outputs"].values())


def test_errors():
    d = sym.var("data")
    with pytest.raises(ShapeError, match=r"bn \(BatchNorm\): axis=3 is out of range"):
        sym.BatchNorm(d, axis=3, name="bn").infer_shape(data=(2, 3, 4))
    with pytest.raises(ShapeError, match=r"input 'bn_gamma'|input 'gamma' has shape \(4,\), expected \(3,\)"):
        sym.BatchNorm(d, name="bn").infer_shape(data=(2, 3, 4), bn_gamma=(4,))
    with pytest.raises(AttrError, match="eps must be positive"):
        sym.BatchNorm(d, eps=0.0)
