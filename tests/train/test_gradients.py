"""Gradients: every differentiable MXNet op case (tests/data/ops, made by MXNet 1.9.1) and finite differences.

MXNet cases: forward(is_train=True) + backward(out_grads=head_grad:*) (loss ops: backward()), every
`grad:<name>` compared with max|g - ref| <= 1e-5 * max|ref| (the references' README: MXNet's two kernel
libraries disagree by up to 3e-6 on op gradients). Finite differences: directional derivative of a
float64 numpy forward, <g, v> vs (f(x + eps v) - f(x - eps v)) / 2 eps for a random direction v.
"""
import json

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.ops import REGISTRY
from mxcc_testing import DATA, needs_gcc, rel_err

pytestmark = needs_gcc

MANIFEST = json.loads((DATA / "ops" / "manifest.json").read_text())["cases"]
DATA_INPUTS = {"data", "a", "b", "c", "label"}


class _SGD0:
    """The update is not under test here: a zero learning rate leaves the weights alone."""
    kind, state_names = "sgd", ()

    def step_hyper(self, t):
        return {"lr": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0}

    def multipliers(self, graph, names):
        return {}, {}


def _grad_cases():
    for name, case in MANIFEST.items():
        if not (case["backward"] or {}).get("called") or not case["is_train"]:
            continue
        ops = set(case["ops_in_json"])
        if not all(op in REGISTRY and REGISTRY[op].grad is not None for op in ops):
            continue        # TODO(6): gradient rules of the CNN operators
        yield name


@pytest.mark.parametrize("name", list(_grad_cases()))
def test_op_case_gradients_match_mxnet(name):
    case = MANIFEST[name]
    arrays = np.load(DATA / "ops" / case["files"]["arrays"])
    shapes = {k: tuple(v) for k, v in case["arguments"].items() if k in DATA_INPUTS}
    params = {k[4:]: arrays[k] for k in arrays.files if k.startswith("arg:") and k[4:] not in DATA_INPUTS}
    exe = mxcc.compile(DATA / "ops" / case["files"]["symbol"], shapes, params or None, train=True,
                       optimizer=_SGD0(), inputs_need_grad=True)
    inputs = {k: arrays[f"arg:{k}"] for k in shapes}
    outs = exe.forward(is_train=True, **inputs)
    for i, out in enumerate(outs):
        assert rel_err(out, arrays[f"out:{i}"]) <= 1e-5
    heads = [arrays[k] for k in sorted(k for k in arrays.files if k.startswith("head_grad:"))]
    exe.backward(heads if heads and not case["loss_op"] else None)
    checked = 0
    for k in arrays.files:
        if k.startswith("grad:"):
            var = k[5:]
            assert var in exe.grad_dict, f"no gradient computed for {var}"
            assert rel_err(exe.grad_dict[var], arrays[k]) <= 1e-5, var
            checked += 1
    assert checked > 0


def _directional_check(net, shapes, forward64, rng, eps=1e-3, tol=2e-3):
    """Compiled gradient vs a central difference of the float64 numpy forward along a random direction."""
    exe = mxcc.compile(net, shapes, train=True, optimizer=_SGD0(), inputs_need_grad=True)
    params = {k: rng.standard_normal(s).astype(np.float32) * 0.5 for k, s in exe.param_shapes.items()}
    exe.set_params(params)
    inputs = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    outs = exe.forward(**inputs)
    head = [rng.standard_normal(o.shape).astype(np.float32) for o in outs]
    exe.backward(head)
    values = {**{k: v.astype(np.float64) for k, v in inputs.items()},
              **{k: v.astype(np.float64) for k, v in params.items()}}

    def loss(vals):
        return sum(float((o * h).sum()) for o, h in zip(forward64(vals), head))

    for name, g in exe.grad_dict.items():
        v = rng.standard_normal(g.shape)
        plus = dict(values, **{name: values[name] + eps * v})
        minus = dict(values, **{name: values[name] - eps * v})
        fd = (loss(plus) - loss(minus)) / (2 * eps)
        an = float((g.astype(np.float64) * v).sum())
        assert abs(fd - an) <= tol * max(1.0, abs(fd)), (name, fd, an)


def test_finite_differences_mlp_block(rng):
    d = sym.var("data")
    h = sym.Activation(sym.FullyConnected(d, num_hidden=7, name="fc1"), act_type="tanh")
    h = sym.FullyConnected(sym.sigmoid(h) * h + 1.5, num_hidden=5, name="fc2")
    net = sym.softsign(h) - sym.square(h) / 3

    def f(v):
        a = np.tanh(v["data"] @ v["fc1_weight"].T + v["fc1_bias"])
        z = ((1 / (1 + np.exp(-a))) * a + 1.5) @ v["fc2_weight"].T + v["fc2_bias"]
        return [z / (1 + np.abs(z)) - z * z / 3]

    _directional_check(net, {"data": (4, 6)}, f, rng)


def test_finite_differences_elementwise_and_flatten(rng):
    a, b = sym.var("a"), sym.var("b")
    y = sym.exp(a / 4) * b - a / (b * b + 2) + 3 / (sym.abs(b) + 1) - sym.sqrt(sym.square(a) + 1) + sym.relu(a - b)
    net = sym.FullyConnected(sym.Flatten(sym.log(sym.square(y) + 1)), num_hidden=3, name="fc")

    def f(v):
        A, B = v["a"], v["b"]
        y = np.exp(A / 4) * B - A / (B * B + 2) + 3 / (np.abs(B) + 1) - np.sqrt(A * A + 1) + np.maximum(A - B, 0)
        t = np.log(y * y + 1).reshape(A.shape[0], -1)
        return [t @ v["fc_weight"].T + v["fc_bias"]]

    _directional_check(net, {"a": (2, 3, 4), "b": (2, 3, 4)}, f, rng)
