"""mxcc.initializer: MXNet 1.9.1's JSON forms, Xavier fan rules, naming dispatch and Module.init_params
outcome (tests/data/train_libs/initializer_ref.json), and the sampled distributions (numpy's samples are
not MXNet's, so distributions are compared through statistics).

Tolerances: a uniform bound from MXNet's sample maximum over >= 6400 draws is within 0.1% of the true
bound (1% allowed); standard deviations of >= 6400 draws are within ~2% (5% allowed).
"""
import json

import numpy as np
import pytest

from mxcc import sym
from mxcc.errors import ParamsError
from mxcc.initializer import (Constant, InitDesc, MSRAPrelu, Normal, One, Uniform, Xavier, Zero, create,
                              init_params)
from mxcc_testing import DATA

REF = json.loads((DATA / "train_libs" / "initializer_ref.json").read_text())


def test_dumps_match_mxnet():
    ours = {
        "Xavier()": Xavier(), "Xavier(gaussian,in,2.34)": Xavier(rnd_type="gaussian", factor_type="in", magnitude=2.34),
        "Uniform()": Uniform(), "Uniform(0.01)": Uniform(0.01), "Normal(0.5)": Normal(0.5), "Zero()": Zero(),
        "One()": One(), "Constant(2)": Constant(2), "Constant(0.5)": Constant(0.5), "MSRAPrelu()": MSRAPrelu(),
    }
    assert {k: v.dumps() for k, v in ours.items()} == REF["dumps"]
    for init in ours.values():                       # and create() reads the JSON form back
        assert create(init.dumps()) == init
    assert isinstance(create("zeros"), Zero) and isinstance(create("ones"), One)
    assert create("xavier", magnitude=2).magnitude == 2.0
    with pytest.raises(ParamsError):
        create("orthogonal")


@pytest.mark.parametrize("rec", REF["xavier_stats"], ids=lambda r: f"{r['shape']}-{r['rnd_type']}-{r['factor_type']}-{r['magnitude']}")
def test_xavier_fans_match_mxnet(rec):
    init = Xavier(rnd_type=rec["rnd_type"], factor_type=rec["factor_type"], magnitude=rec["magnitude"])
    scale = init.scale_for(tuple(rec["shape"]))
    if rec["rnd_type"] == "uniform":
        assert rec["max_abs"] <= scale <= rec["max_abs"] * 1.01
    else:
        assert scale == pytest.approx(rec["std"], rel=0.05)
    arr = np.zeros(rec["shape"], np.float32)
    init(InitDesc("layer_weight"), arr, np.random.default_rng(1))
    assert arr.std() == pytest.approx(rec["std"], rel=0.05)
    if rec["rnd_type"] == "uniform":
        assert np.abs(arr).max() <= np.float32(scale) and np.abs(arr).max() >= 0.99 * scale


def test_distributions():
    rng = np.random.default_rng(3)
    a = np.zeros((200, 300), np.float32)
    Uniform(0.05)("w_weight", a, rng)
    assert np.abs(a).max() <= np.float32(0.05) and a.std() == pytest.approx(0.05 / np.sqrt(3), rel=0.02)
    assert abs(a.mean()) < 0.05 * 0.02
    Normal(0.3)("w_weight", a, rng)
    assert a.std() == pytest.approx(0.3, rel=0.02) and abs(a.mean()) < 0.3 * 0.02
    Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)("w_weight", a, rng)
    assert a.std() == pytest.approx(np.sqrt(2 / 300), rel=0.02)
    c = np.zeros((3, 4, 5, 5), np.float32)
    assert Xavier(factor_type="out").scale_for(c.shape) == np.sqrt(3 / (3 * 25))
    with pytest.raises(ValueError):
        Xavier()("fc_weight", np.zeros(5, np.float32), rng)
    Constant(np.arange(5.0))("x_weight", c, rng)              # an array value broadcasts, as in MXNet
    assert (c == np.arange(5.0)).all()


def test_naming_dispatch_matches_mxnet():
    """MXNet's Initializer(InitDesc(name), arr) outcomes; mxcc adds the BatchNorm statistics, which MXNet
    initialises through the __init__ attributes its BatchNorm sets (checked in test_module_init_params)."""
    extensions = {"bn_moving_mean": "zeros", "bn_moving_var": "ones"}
    for name, expected in REF["dispatch_initdesc_xavier"].items():
        arr = np.full((4, 3), 7.0, np.float32)
        expected = extensions.get(name, expected)
        if expected == "error":
            with pytest.raises(ParamsError):
                Xavier()(InitDesc(name), arr)
            continue
        Xavier()(InitDesc(name), arr)
        got = "zeros" if (arr == 0).all() else "ones" if (arr == 1).all() else "random"
        assert got == expected, name


def test_init_attribute_overrides_name():
    for name, rec in REF["init_attr_override"].items():
        arr = np.full((4, 3), 7.0, np.float32)
        Uniform(0.1)(InitDesc(name, {"__init__": rec["__init__"]}), arr)
        assert (arr == np.float32(rec["value"])).all(), name
    v = sym.Variable("w0", init=Constant(0.5))          # mxcc's Symbol writes the attribute the same way
    assert v.attr("__init__") == '["constant", {"value": 0.5}]'


def test_module_init_params():
    """Which rule each parameter / aux state gets, as Module.init_params(Xavier()) did in MXNet."""
    ref = REF["module_init_params"]
    net = sym.load_json(json.dumps(ref["symbol"]))
    arg, aux = init_params(net, {"data": (2, 5)}, Xavier(), seed=0)
    kind = {k: "zeros" if (v == 0).all() else "ones" if (v == 1).all() else "random" for k, v in {**arg, **aux}.items()}
    assert kind == {**ref["arg"], **ref["aux"]}
    assert {k: list(v.shape) for k, v in arg.items()} == ref["arg_shapes"]
    assert all(v.dtype == np.float32 for v in {**arg, **aux}.values())
    assert set(aux) == {"bn_moving_mean", "bn_moving_var"} and "softmax_label" not in arg


def test_init_params_seed_and_cpp_package_mode():
    mlp = sym.load(DATA / "train" / "mlp" / "mlp-symbol.json")     # w0..b2: no MXNet naming suffix
    with pytest.raises(ParamsError, match="w0"):
        init_params(mlp, {"X": (100, 784)}, Uniform(0.01))
    a1, _ = init_params(mlp, {"X": (100, 784)}, Uniform(0.01), seed=4, by_name=False)
    a2, _ = init_params(mlp, {"X": (100, 784)}, Uniform(0.01), seed=4, by_name=False)
    a3, _ = init_params(mlp, {"X": (100, 784)}, "uniform", seed=5, by_name=False)
    assert list(a1) == ["w0", "b0", "w1", "b1", "w2", "b2"]
    assert all((a1[k] == a2[k]).all() for k in a1) and not (a1["w0"] == a3["w0"]).all()
    assert all(0 < np.abs(v).max() <= np.float32(0.01) for v in a1.values())    # biases too, as the C++ package
