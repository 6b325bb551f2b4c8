"""MXNet's grad_req on a training build (compiler.grad_reqs; simple_bind's forms: a string for every argument, a
list in argument order, a dict by name), and backward() after either forward mode.

Truth: a float64 numpy forward/backward of a small FullyConnected + BatchNorm network; 'add' after two backward
calls is twice the gradient, and the optimizer update reads the sum."""
import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.compiler.driver import grad_reqs
from mxcc.errors import ShapeError
from mxcc.optimizer import SGD
from mxcc.passes import bind, infer_shapes
from mxcc_testing import needs_gcc, rel_err

pytestmark = needs_gcc
SHAPES = {"data": (5, 6)}
EPS = 1e-3


def _net():
    with sym.NameManager():
        h = sym.FullyConnected(sym.var("data"), num_hidden=4, name="fc")
        return sym.BatchNorm(h, fix_gamma=False, eps=EPS, name="bn")


def _params(rng):
    return {"fc_weight": rng.standard_normal((4, 6)).astype(np.float32),
            "fc_bias": rng.standard_normal(4).astype(np.float32),
            "bn_gamma": rng.uniform(0.5, 1.5, 4).astype(np.float32),
            "bn_beta": rng.standard_normal(4).astype(np.float32),
            "aux:bn_moving_mean": rng.standard_normal(4).astype(np.float32),
            "aux:bn_moving_var": rng.uniform(0.5, 2, 4).astype(np.float32)}


def _reference(p, x, head, is_train):
    """float64 gradients of sum(head * bn(fc(x))) for every argument, BatchNorm in either mode."""
    f = {k: np.asarray(v, np.float64) for k, v in p.items()}
    x, head = x.astype(np.float64), head.astype(np.float64)
    h = x @ f["fc_weight"].T + f["fc_bias"]
    if is_train:
        mean, var = h.mean(0), h.var(0)
    else:
        mean, var = f["aux:bn_moving_mean"], f["aux:bn_moving_var"]
    inv = 1 / np.sqrt(var + EPS)
    xhat = (h - mean) * inv
    g = {"bn_gamma": (head * xhat).sum(0), "bn_beta": head.sum(0)}
    dxhat = head * f["bn_gamma"]
    if is_train:
        n = len(h)
        dh = inv / n * (n * dxhat - dxhat.sum(0) - xhat * (dxhat * xhat).sum(0))
    else:
        dh = dxhat * inv
    g.update(fc_weight=dh.T @ x, fc_bias=dh.sum(0), data=dh @ f["fc_weight"])
    return g


def _check(grads: dict, want: dict, factor=lambda name: 1):
    """Each gradient within 1e-5 of the largest reference gradient (a bias before a training BatchNorm has
    gradient 0 in exact arithmetic: float32 leaves rounding noise there)."""
    scale = max(float(np.abs(w).max()) for w in want.values())
    for name, g in grads.items():
        err = float(np.abs(g - factor(name) * want[name]).max())
        assert err <= 1e-5 * max(scale, float(np.abs(factor(name) * want[name]).max())), name


def _compile(**kw):
    return mxcc.compile(_net(), SHAPES, train=True, optimizer=SGD(learning_rate=0.0), **kw)


def test_grad_req_forms_as_simple_bind():
    g = infer_shapes(bind(_net().graph), SHAPES)
    args = ["data", "fc_weight", "fc_bias", "bn_gamma", "bn_beta"]
    assert grad_reqs(g, SHAPES) == {a: "null" if a == "data" else "write" for a in args}   # Module's defaults
    assert grad_reqs(g, SHAPES, inputs_need_grad=True) == dict.fromkeys(args, "write")
    assert grad_reqs(g, SHAPES, "add") == dict.fromkeys(args, "add")
    assert grad_reqs(g, SHAPES, ["null", "write", "add", "null", "write"]) == dict(zip(
        args, ["null", "write", "add", "null", "write"]))
    assert grad_reqs(g, SHAPES, {"fc_weight": "add"}) == {a: "add" if a == "fc_weight" else "null" for a in args}
    assert grad_reqs(g, SHAPES, {"fc_weight": "add"}, inputs_need_grad=True)["data"] == "write"
    with pytest.raises(ShapeError, match="'fc_wieght'.*not arguments.*fc_weight"):
        grad_reqs(g, SHAPES, {"fc_wieght": "add"})
    with pytest.raises(ShapeError, match="'inplace' for 'data'.*'write', 'add', 'null'"):
        grad_reqs(g, SHAPES, "inplace")
    with pytest.raises(ShapeError, match="list of 2, expected one per argument"):
        grad_reqs(g, SHAPES, ["write", "add"])
    with pytest.raises(TypeError, match="grad_req= and inputs_need_grad= need train=True"):
        mxcc.compile(_net(), SHAPES, grad_req="write")


@pytest.mark.parametrize("is_train", [True, False], ids=["train", "infer"])
def test_write_add_null_after_either_forward(is_train, rng):
    p = _params(rng)
    x = rng.standard_normal(SHAPES["data"]).astype(np.float32)
    head = rng.standard_normal((5, 4)).astype(np.float32)
    want = _reference(p, x, head, is_train)
    req = {"data": "write", "fc_weight": "add", "fc_bias": "null", "bn_gamma": "add", "bn_beta": "write"}
    exe = _compile(grad_req=req, poison=True)
    assert sorted(exe.grad_dict) == ["bn_beta", "bn_gamma", "data", "fc_weight"]
    exe.set_params(p)
    for name in exe.grad_dict:
        exe.grad_dict[name][:] = 0                  # as with MXNet, 'add' starts from what the array holds
    for calls in (1, 2):
        exe.forward(is_train=is_train, data=x)
        exe.backward(head)
        _check(exe.grad_dict, want, lambda name: calls if req[name] == "add" else 1)


def test_backward_follows_the_last_forward(rng):
    """A training forward then an inference forward then backward(): the inference gradient (MXNet's), and
    the inference outputs keep their values through it."""
    p = _params(rng)
    x = rng.standard_normal(SHAPES["data"]).astype(np.float32)
    head = rng.standard_normal((5, 4)).astype(np.float32)
    exe = _compile(inputs_need_grad=True, poison=True)
    exe.set_params(p)
    with pytest.raises(ShapeError, match="needs a forward"):
        exe.backward(head)
    exe.forward(is_train=True, data=x)
    out = exe.forward(is_train=False, data=x)[0]
    kept = out.copy()
    exe.backward(head)
    np.testing.assert_array_equal(out, kept)
    _check(exe.grad_dict, _reference(p, x, head, False))
    exe.forward(is_train=True, data=x)
    exe.backward(head)
    _check(exe.grad_dict, _reference(p, x, head, True))


def test_update_reads_the_accumulated_gradient(rng):
    p = _params(rng)
    x = rng.standard_normal(SHAPES["data"]).astype(np.float32)
    exe = mxcc.compile(sym.MakeLoss(sym.sum(sym.square(_net()))), SHAPES, train=True,
                       optimizer=SGD(learning_rate=0.1), grad_req={"fc_weight": "add", "bn_beta": "null"})
    assert sorted(exe.grad_dict) == ["fc_weight"]
    exe.set_params(p)
    exe.grad_dict["fc_weight"][:] = 0
    exe.forward(is_train=True, data=x)
    exe.backward()
    one = exe.grad_dict["fc_weight"].copy()
    exe.forward(is_train=True, data=x)
    exe.backward()
    assert rel_err(exe.grad_dict["fc_weight"], 2 * one) <= 1e-6
    w, beta = exe.arg_dict["fc_weight"].copy(), exe.arg_dict["bn_beta"].copy()
    exe.update()
    assert rel_err(exe.arg_dict["fc_weight"], w - 0.1 * 2 * one) <= 1e-6
    np.testing.assert_array_equal(exe.arg_dict["bn_beta"], beta)       # 'null': no gradient, no update


def test_backward_takes_one_out_grad_per_output_as_mxnet(rng):
    """MXNet's backward(out_grads) takes one array per output; those of outputs no gradient flows from (a loss
    head, a BlockGrad) are ignored. The shorter form, one per output that takes a gradient, works too."""
    with sym.NameManager():
        h = sym.FullyConnected(sym.var("data"), num_hidden=4, name="fc")
        net = sym.Group([sym.tanh(h, name="t"), sym.BlockGrad(h, name="bg"), sym.relu(h, name="r")])
    x = rng.standard_normal(SHAPES["data"]).astype(np.float32)
    p = {"fc_weight": rng.standard_normal((4, 6)).astype(np.float32), "fc_bias": np.zeros(4, np.float32)}
    heads = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(3)]
    exe = mxcc.compile(net, SHAPES, p, train=True, optimizer=SGD(learning_rate=0.0))
    exe.forward(is_train=True, data=x)
    exe.backward(heads)                                  # MXNet's form: three, the BlockGrad's ignored
    full = exe.grad_dict["fc_weight"].copy()
    exe.backward([heads[0], heads[2]])                   # one per output a gradient flows from
    np.testing.assert_array_equal(exe.grad_dict["fc_weight"], full)
    z = x @ p["fc_weight"].T
    dz = heads[0] * (1 - np.tanh(z) ** 2) + heads[2] * (z > 0)
    assert rel_err(full, dz.T @ x) <= 1e-5
    with pytest.raises(ShapeError, match="one per output"):
        exe.backward(heads[:1])
