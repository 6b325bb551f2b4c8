"""Gradients: every differentiable MXNet op case (tests/data/ops, made by MXNet 1.9.1) and finite differences.

MXNet cases, through MXNet's own call sequence: a training build with the case's grad_req (inputs included),
forward(is_train=T) + backward(out_grads=head_grad:*) (loss ops: backward()), with T the case's `is_train`;
for ops whose forward does not depend on the mode, also after forward(is_train=not T) (the same reference).
Every build is a poisoning build (CompileOptions.poison: the arena, outputs, gradients and each kernel's
outputs are NaN before they are written), so a kernel that reads memory nothing wrote fails here. Checked:
every `grad:<name>`, the outputs (training BatchNorm: batch statistics) and `aux_after:<name>` (moving
statistics updated in training, untouched otherwise), each max|got - ref| <= 1e-5 * max|ref| (the
references' README: MXNet's two kernel libraries disagree by up to 3e-6 on op gradients), and no gradient
for an argument whose grad_req is 'null'. A gradient that is zero in exact arithmetic (a bias before a
training BatchNorm) holds rounding noise in MXNet: it is compared on the scale of the case's largest
gradient instead. MXNet also writes 1 into gamma when fix_gamma (arg_after): mxcc leaves gamma alone (it is
ignored either way). To keep compile time down the cases are compiled in groups: each group is one graph
holding several cases side by side (node names prefixed `c<i>_`).
Finite differences: directional derivative of a float64 numpy forward, <g, v> vs
(f(x + eps v) - f(x - eps v)) / 2 eps for a random direction v.
"""
import json
from dataclasses import replace

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.graph import load_json
from mxcc.graph.ir import Graph
from mxcc.ops import REGISTRY
from mxcc_testing import DATA, SGD0, compile_for_gradients, needs_gcc, rel_err

pytestmark = needs_gcc

MANIFEST = json.loads((DATA / "ops" / "manifest.json").read_text())["cases"]
DATA_INPUTS = {"data", "a", "b", "c", "label"}
GROUP_SIZE = 24          # cases per compiled graph


def _grad_cases():
    for name, case in MANIFEST.items():
        if not (case["backward"] or {}).get("called"):
            continue
        if all(op in REGISTRY and REGISTRY[op].grad is not None for op in case["ops_in_json"]):
            yield name


def _groups() -> dict[str, list[str]]:
    """Case name -> the cases compiled with it: same is_train, consecutive in the manifest, <= GROUP_SIZE."""
    by_mode: dict[bool, list[str]] = {}
    for name in _grad_cases():
        by_mode.setdefault(MANIFEST[name]["is_train"], []).append(name)
    out = {}
    for names in by_mode.values():
        for i in range(0, len(names), GROUP_SIZE):
            chunk = names[i:i + GROUP_SIZE]
            out.update({n: chunk for n in chunk})
    return out


GROUPS = _groups()
_RESULTS: dict[str, object] = {}


def _merged(names: list[str]) -> Graph:
    """The cases' graphs side by side in one graph, every node name prefixed with `c<i>_`."""
    nodes, heads, attrs = [], [], ()
    for i, name in enumerate(names):
        g = load_json(DATA / "ops" / MANIFEST[name]["files"]["symbol"])
        base, pre = len(nodes), f"c{i}_"
        nodes += [replace(n, id=base + n.id, name=pre + n.name,
                          inputs=tuple(replace(r, node=base + r.node) for r in n.inputs),
                          control_deps=tuple(base + d for d in n.control_deps)) for n in g.nodes]
        heads += [replace(h, node=base + h.node) for h in g.heads]
        attrs = g.attrs
    return Graph(nodes=tuple(nodes), heads=tuple(heads), attrs=attrs)


def _mode_dependent(name: str) -> bool:
    """Whether the case's forward differs between training and inference (BatchNorm, Dropout...)."""
    return any(REGISTRY[op].train_op is not None for op in MANIFEST[name]["ops_in_json"])


def _run_group(names: list[str]) -> dict:
    """Compile the group once; per case and mode: outputs, grads and aux after forward(is_train=mode) + backward
    (the case's own mode, and the other one for cases whose forward does not depend on it)."""
    shapes, params, inputs, heads, arrays, grad_req = {}, {}, {}, [], {}, {}
    for i, name in enumerate(names):
        case, pre = MANIFEST[name], f"c{i}_"
        a = arrays[name] = np.load(DATA / "ops" / case["files"]["arrays"])
        for k, v in case["arguments"].items():
            if k in DATA_INPUTS:
                shapes[pre + k] = tuple(v)
                inputs[pre + k] = a[f"arg:{k}"]
        grad_req.update({pre + k: v for k, v in case["grad_req"].items()})
        params.update({pre + k[4:]: a[k] for k in a.files if k.startswith("arg:") and k[4:] not in DATA_INPUTS})
        params.update({"aux:" + pre + k[4:]: a[k] for k in a.files if k.startswith("aux:")})
        if not case["loss_op"]:
            heads += [a[k] for k in sorted(k for k in a.files if k.startswith("head_grad:"))]
    exe = compile_for_gradients(_merged(names), shapes, params or None, optimizer=SGD0(), grad_req=grad_req, name="ops")
    mode = MANIFEST[names[0]]["is_train"]
    results = {}
    for is_train in (mode, not mode):
        outs = [o.copy() for o in exe.forward(is_train=is_train, **inputs)]
        exe.backward(heads or None)
        k = 0
        for i, name in enumerate(names):
            pre, a = f"c{i}_", arrays[name]
            n_out = len([f for f in a.files if f.startswith("out:")])
            if is_train == mode or not _mode_dependent(name):
                results[(name, is_train)] = dict(
                    arrays=a, outs=outs[k:k + n_out],
                    grads={f[5:]: _copy(exe.grad_dict.get(pre + f[5:])) for f in a.files if f.startswith("grad:")},
                    nulls=[v for v, r in MANIFEST[name]["grad_req"].items() if r == "null" and pre + v in exe.grad_dict],
                    aux={f[10:]: exe.aux_dict[pre + f[10:]].copy() for f in a.files if f.startswith("aux_after:")}
                    if is_train == mode else {})
            k += n_out
    return results


def _copy(a):
    return None if a is None else a.copy()


def _case_result(name: str, is_train: bool) -> dict:
    if (name, is_train) not in _RESULTS:
        names = GROUPS[name]
        if not any(n == name for n, _ in _RESULTS):
            try:
                res = _run_group(names)
            except Exception as e:          # every case of the group reports the failure
                res = {(n, t): e for n in names for t in (True, False)}
            _RESULTS.update(res)
    r = _RESULTS.get((name, is_train))
    if r is None:
        pytest.skip("the forward depends on the mode: MXNet's reference is for the other one")
    if isinstance(r, Exception):
        raise r
    return r


@pytest.mark.parametrize("is_train", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("name", list(GROUPS))
def test_op_case_gradients_match_mxnet(name, is_train):
    r = _case_result(name, is_train)
    a = r["arrays"]
    for i, out in enumerate(r["outs"]):
        assert rel_err(out, a[f"out:{i}"]) <= 1e-5, f"output {i}"
    scale = max(float(np.abs(a[f"grad:{v}"]).max()) for v in r["grads"])
    for var, g in r["grads"].items():
        ref = a[f"grad:{var}"]
        assert g is not None, f"no gradient computed for {var}"
        if np.abs(ref).max() <= 1e-6 * scale:       # zero up to MXNet's rounding: compare on the case's scale
            assert np.abs(g).max() <= 1e-5 * scale, var
        else:
            assert rel_err(g, ref) <= 1e-5, var
    assert not r["nulls"], f"gradients for arguments with grad_req 'null': {r['nulls']}"
    for var, m in r["aux"].items():
        assert rel_err(m, a[f"aux_after:{var}"]) <= 1e-5, f"moving statistic {var}"
    assert r["grads"]


def _directional_check(net, shapes, forward64, rng, eps=1e-3, tol=2e-3):
    """Compiled gradient vs a central difference of the float64 numpy forward along a random direction."""
    exe = mxcc.compile(net, shapes, train=True, optimizer=SGD0(), inputs_need_grad=True)
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
