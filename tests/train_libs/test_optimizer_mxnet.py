"""mxcc.optimizer against MXNet 1.9.1: the numpy update (the oracle for the compiled C update), the
per-step hyper-parameters and the per-parameter multipliers.

References: tests/data/train/mlp (MXNet's 5 SGD steps of the cpp-package MLP, copied from mxnet-ref),
tests/data/train_libs/optimizer_ref.* (gen_train_libs.py: SGD/momentum/clip/schedules/Adam and Module-style
multipliers driven through mx.optimizer.get_updater) and optimizer_rmsprop_ref.* (the same for RMSProp, plain
and centered, with clip_weights). Tolerance: max|w - ref| <= 1e-6 * max|ref| per
step. MXNet's get_updater runs multi_sgd_update, whose operation order (w -= lr*wd*w + lr*(rg*g)) differs
from sgd_update's ((1 - lr*wd)*w - (lr*rg)*g) that update_numpy follows: about 1e-7 apart; the momentum
and Adam paths agree to the bit in practice.
"""
import json
import math
import warnings

import numpy as np
import pytest

from mxcc import sym
from mxcc.optimizer import (SGD, UPDATES, Adam, FactorScheduler, MultiFactorScheduler, RMSProp, create,
                            update_numpy)
from mxcc.params import load_params, split_arg_aux
from mxcc_testing import DATA, rel_err

TOL = 1e-6
REF = DATA / "train_libs"
CASES = json.loads((REF / "optimizer_ref.json").read_text())
RMSPROP = json.loads((REF / "optimizer_rmsprop_ref.json").read_text())
assert RMSPROP["names"] == CASES["names"] and RMSPROP["steps"] == CASES["steps"]
CASES["cases"].update(RMSPROP["cases"])


@pytest.fixture(scope="module")
def arrays():
    out = {}
    for name in ("optimizer_ref.npz", "optimizer_rmsprop_ref.npz"):
        with np.load(REF / name) as f:
            out.update(f)
    return out


def _make(case: dict):
    kw = dict(case["kwargs"])
    if "lr_scheduler" in kw:
        kind, args = kw["lr_scheduler"]
        kw["lr_scheduler"] = (FactorScheduler if kind == "factor" else MultiFactorScheduler)(**args)
    if case["set_wd_mult"] is not None or case["set_lr_mult"] is not None:
        kw["param_idx2name"] = dict(enumerate(CASES["names"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)       # lr_scheduler base_lr overridden, as MXNet warns
        opt = create(case["optimizer"], **kw)
    if case["set_lr_mult"]:
        opt.set_lr_mult(case["set_lr_mult"])
    if case["set_wd_mult"]:
        opt.set_wd_mult({int(k): v for k, v in case["set_wd_mult"].items()})
    return opt


def test_interface_constants():
    assert {k: d.states for k, d in UPDATES.items()} == {
        "sgd": (), "sgd_mom": ("mom",), "adam": ("mean", "var"), "rmsprop": ("var",),
        "rmspropalex": ("var", "mean", "delta")}
    assert SGD().kind == "sgd" and SGD().state_names == ()
    assert SGD(momentum=0.9).kind == "sgd_mom" and SGD(momentum=0.9).state_names == ("mom",)
    assert Adam().kind == "adam" and Adam().state_names == ("mean", "var")
    assert RMSProp().kind == "rmsprop" and RMSProp().state_names == ("var",)
    assert RMSProp(centered=True).kind == "rmspropalex" and len(RMSProp(centered=True).state_names) == 3
    for opt in (SGD(), SGD(momentum=0.9), Adam(), RMSProp(), RMSProp(centered=True)):
        assert tuple(opt.step_hyper(1)) == UPDATES[opt.kind].hyper_names     # the C function's order
    assert isinstance(create("SGD", momentum=0.5), SGD) and isinstance(create("adam"), Adam)
    assert isinstance(create("RMSProp", centered=True), RMSProp)
    with pytest.raises(ValueError):
        create("ftrl")


def test_mlp_trace_sgd_steps():
    """Given step t's weights and raw gradients, the update gives MXNet's step t+1 weights."""
    arg, _ = split_arg_aux(load_params(DATA / "train" / "mlp" / "mlp-init-0000.params"))
    opt = SGD(learning_rate=0.1, wd=1e-4, rescale_grad=1.0 / 100)
    lr_mult, wd_mult = opt.resolve_multipliers(sym.load(DATA / "train" / "mlp" / "mlp-symbol.json"), list(arg))
    assert set(lr_mult.values()) == set(wd_mult.values()) == {1.0}      # biases decay too, as get_updater does
    with np.load(DATA / "train" / "mlp" / "mlp-trace.npz") as trace:
        weights = dict(arg)
        for t in range(5):
            hyper = opt.step_hyper(t + 1)
            for name in arg:
                new, state = opt.update_numpy(weights[name], trace[f"step{t}_grad:{name}"], (), hyper,
                                              lr_mult[name], wd_mult[name])
                ref = trace[f"step{t}_weight:{name}"]
                assert state == () and new.dtype == np.float32
                assert rel_err(new, ref) <= TOL, (t, name)
                weights[name] = ref


@pytest.mark.parametrize("case", sorted(CASES["cases"]))
def test_mxnet_optimizer_steps(case, arrays):
    """Each of 6 steps from MXNet's own weights and states (one-step error), and the whole run chained
    through update_numpy alone (drift), for 3 parameters of different shapes."""
    spec = CASES["cases"][case]
    opt = _make(spec)
    names = CASES["names"]
    # Only the Module-style case gave MXNet the symbol and the names; without them MXNet uses no attributes.
    source = sym.load(REF / "optimizer_mults-symbol.json") if opt.idx2name else None
    lr_mult, wd_mult = opt.resolve_multipliers(source, names)
    n_state = len(opt.state_names)
    chained = [(arrays[f"{case}/init:{i}"], opt.create_state(arrays[f"{case}/init:{i}"])) for i in range(3)]
    stepped = list(chained)
    for t in range(CASES["steps"]):
        hyper = opt.step_hyper(t + 1)
        for i, name in enumerate(names):
            grad = arrays[f"{case}/step{t}_grad:{i}"]
            ref_w = arrays[f"{case}/step{t}_weight:{i}"]
            ref_s = tuple(arrays[f"{case}/step{t}_state{k}:{i}"] for k in range(n_state))
            w, s = opt.update_numpy(stepped[i][0], grad, stepped[i][1], hyper, lr_mult[name], wd_mult[name])
            assert rel_err(w, ref_w) <= TOL, (t, name)
            for got, ref in zip(s, ref_s):
                assert rel_err(got, ref) <= TOL, (t, name, "state")
            chained[i] = opt.update_numpy(chained[i][0], grad, chained[i][1], hyper, lr_mult[name], wd_mult[name])
            assert rel_err(chained[i][0], ref_w) <= 5 * TOL, (t, name, "chained")
            stepped[i] = (ref_w, ref_s)
    # the multipliers MXNet used at the last step
    last = opt.step_hyper(CASES["steps"])
    lr_used = [last["lr"] * lr_mult[n] for n in names]
    if opt.kind == "adam":       # MXNet's _get_lr has no bias correction
        t = CASES["steps"]
        lr_used = [x / (math.sqrt(1 - opt.beta2 ** t) / (1 - opt.beta1 ** t)) for x in lr_used]
    assert lr_used == pytest.approx(spec["lr_used_last_step"], rel=1e-12)
    assert [last["wd"] * wd_mult[n] for n in names] == pytest.approx(spec["wd_used"], rel=1e-12)


def test_module_style_multipliers():
    """Precedence: explicit index > explicit name > variable attribute > default (MXNet's Module path)."""
    names = CASES["names"]
    source = sym.load(REF / "optimizer_mults-symbol.json")     # written by MXNet: __lr_mult__, __wd_mult__
    opt = SGD(learning_rate=0.1, wd=0.01, param_idx2name=dict(enumerate(names)))
    assert opt.wd_rule == "module"
    assert opt.resolve_multipliers(source, names) == (
        {"fc_weight": 2.0, "fc_bias": 1.0, "conv_weight": 0.5}, {"fc_weight": 1.0, "fc_bias": 0.5, "conv_weight": 3.0})
    opt.set_lr_mult({"fc_bias": 3.0, 0: 7.0})
    opt.set_wd_mult({2: 0.25, "conv_weight": 9.0})
    assert opt.multipliers(source, names) == (
        {"fc_weight": 7.0, "fc_bias": 3.0, "conv_weight": 0.5}, {"fc_weight": 1.0, "fc_bias": 0.5, "conv_weight": 0.25})


def test_wd_rules():
    names = ["fc1_weight", "fc1_bias", "bn_gamma", "bn_beta", "w0", "b0"]
    assert set(SGD(wd=0.1).resolve_multipliers({}, names)[1].values()) == {1.0}
    _, wd = SGD(wd=0.1, wd_rule="module").resolve_multipliers({}, names)
    assert wd == {"fc1_weight": 1.0, "fc1_bias": 0.0, "bn_gamma": 1.0, "bn_beta": 0.0, "w0": 0.0, "b0": 0.0}
    _, wd = SGD(param_idx2name={0: "fc1_weight"}, wd_rule="all").resolve_multipliers(None, names)
    assert set(wd.values()) == {1.0}
    with pytest.raises(ValueError):
        SGD(wd_rule="bias")


def test_step_hyper_values():
    h = SGD(learning_rate=0.5, wd=0.1, rescale_grad=0.25, momentum=0.9, clip_gradient=2.0).step_hyper(3)
    assert h == {"lr": 0.5, "wd": 0.1, "momentum": 0.9, "rescale_grad": 0.25, "clip_gradient": 2.0}
    for off in (None, 0, 0.0):                 # MXNet passes clip_gradient only when truthy
        assert SGD(clip_gradient=off).step_hyper(1)["clip_gradient"] == -1.0
    assert SGD(clip_gradient=-3.0).step_hyper(1)["clip_gradient"] == -3.0      # the kernel ignores < 0
    assert SGD().step_hyper(1)["lr"] == 0.01                                    # MXNet's default
    adam = Adam(learning_rate=0.002, beta1=0.8, beta2=0.95, epsilon=1e-7)
    for t in (1, 2, 10, 1000):
        h = adam.step_hyper(t)
        assert h["lr"] == 0.002 * (math.sqrt(1.0 - 0.95 ** t) / (1.0 - 0.8 ** t))
        assert (h["beta1"], h["beta2"], h["epsilon"]) == (0.8, 0.95, 1e-7)
    with pytest.raises(ValueError):
        adam.step_hyper(0)
    sched = Adam(lr_scheduler=FactorScheduler(step=1, factor=0.5, base_lr=0.001))
    assert sched.step_hyper(3)["lr"] == pytest.approx(0.001 * 0.25 * math.sqrt(1 - 0.999 ** 3) / (1 - 0.9 ** 3))


def test_update_numpy_formulas():
    """Against the documented formulas in float64 (independent of the float32 operation order)."""
    rng = np.random.default_rng(0)
    w, g, m, v = (rng.standard_normal(1000).astype(np.float32) for _ in range(4))
    v = np.abs(v)
    lr, wd, rg, c, mom = 0.1, 0.01, 0.5, 0.3, 0.9
    h = dict(lr=lr, wd=wd, rescale_grad=rg, clip_gradient=c, momentum=mom, beta1=0.9, beta2=0.999, epsilon=1e-8)
    w64, g64, m64, v64 = (x.astype(np.float64) for x in (w, g, m, v))
    got, _ = update_numpy("sgd", w, g, (), h, lr_mult=2.0, wd_mult=0.5)
    ref = (1 - 2 * lr * 0.5 * wd) * w64 - 2 * lr * np.clip(rg * g64, -c, c)
    assert rel_err(got, ref) <= 1e-6
    got, (mom_new,) = update_numpy("sgd_mom", w, g, (m,), h)
    ref_m = mom * m64 - lr * wd * w64 - lr * np.clip(rg * g64, -c, c)
    assert rel_err(mom_new, ref_m) <= 1e-6 and rel_err(got, w64 + ref_m) <= 1e-6
    got, (mean, var) = update_numpy("adam", w, g, (m, v), h)
    gp = np.clip(rg * g64 + wd * w64, -c, c)                 # Adam: weight decay before the clip
    ref_mean, ref_var = 0.9 * m64 + 0.1 * gp, 0.999 * v64 + 0.001 * gp ** 2
    assert rel_err(mean, ref_mean) <= 1e-6 and rel_err(var, ref_var) <= 1e-5   # (1 - 0.999f) is 1.3e-5 off
    assert rel_err(got, w64 - lr * ref_mean / (np.sqrt(ref_var) + 1e-8)) <= 1e-5
    assert rel_err(update_numpy("sgd", w, g, (), {**h, "clip_gradient": -1.0})[0],
                   (1 - lr * wd) * w64 - lr * rg * g64) <= 1e-6
    g1, g2, eps, cw = 0.9, 0.8, 1e-6, 1.5
    h.update(gamma1=g1, gamma2=g2, epsilon=eps, clip_weights=cw)
    got, (var,) = update_numpy("rmsprop", w, g, (v,), h, lr_mult=2.0, wd_mult=0.5)
    gp = np.clip(rg * g64 + 0.5 * wd * w64, -c, c)           # RMSProp: weight decay before the clip too
    ref_var = (1 - g1) * gp ** 2 + g1 * v64
    assert rel_err(var, ref_var) <= 1e-6
    assert rel_err(got, np.clip(w64 - 2 * lr * gp / np.sqrt(ref_var + eps), -cw, cw)) <= 1e-6
    d = rng.standard_normal(1000).astype(np.float32)
    va = (m64 ** 2 + v64).astype(np.float32)                  # E[g^2] >= E[g]^2, as the states keep it
    got, (var, mean, delta) = update_numpy("rmspropalex", w, g, (va, m, d), h)
    gp = np.clip(rg * g64 + wd * w64, -c, c)
    ref_var, ref_mean = (1 - g1) * gp ** 2 + g1 * va.astype(np.float64), (1 - g1) * gp + g1 * m64
    ref_delta = g2 * d.astype(np.float64) - lr * gp / np.sqrt(ref_var - ref_mean ** 2 + eps)
    assert rel_err(var, ref_var) <= 1e-6 and rel_err(mean, ref_mean) <= 1e-6 and rel_err(delta, ref_delta) <= 1e-5
    assert rel_err(got, np.clip(w64 + ref_delta, -cw, cw)) <= 1e-5
    assert rel_err(update_numpy("rmsprop", w, g, (v,), {**h, "clip_weights": -1.0})[0],
                   w64 - lr * gp / np.sqrt((1 - g1) * gp ** 2 + g1 * v64 + eps)) <= 1e-6
    with pytest.raises(ValueError):
        update_numpy("sgd_mom", w, g, (), h)


def test_learning_rate_and_scheduler_override():
    s = FactorScheduler(step=2, factor=0.5, base_lr=1.0)
    with pytest.warns(UserWarning):
        opt = SGD(learning_rate=0.2, lr_scheduler=s)
    assert s.base_lr == 1.0                                   # the caller's scheduler is left alone
    assert [opt.step_hyper(t)["lr"] for t in (1, 2, 3, 5)] == [0.2, 0.2, 0.1, 0.05]
    assert SGD(lr_scheduler=s).learning_rate == 1.0
    with pytest.raises(UserWarning):
        opt.set_learning_rate(0.3)
    plain = SGD(learning_rate=0.3)
    plain.set_learning_rate(0.4)
    assert plain.step_hyper(1)["lr"] == 0.4 == plain.learning_rate
