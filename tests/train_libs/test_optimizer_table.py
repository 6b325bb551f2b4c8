"""The optimizer table (mxcc/train/optimizer.py's UPDATES) against the C it describes, and the compiled
update against MXNet 1.9.1.

- Every entry's C function is declared in runtime_c/optim.h with the entry's parameters: its states, then
  its hyper-parameters in the entry's order and under its names, so a table and a declaration that disagree
  fail here rather than as wrong numbers.
- MXCC_NUM_HYPER (runtime_c/mxcc_runtime.h) holds the largest entry (each generated update also checks its
  own with a _Static_assert).
- The compiled `<net>_update`, run by Executor.update() from MXNet's own weights, states and gradients
  (tests/data/train_libs/optimizer_ref.* and optimizer_rmsprop_ref.*, see gen_train_libs.py), gives MXNet's
  next weights and states: every case, so every entry of the table, with wd, rescale_grad, clip_gradient,
  clip_weights, schedules and Module-style lr_mult/wd_mult. Tolerance as test_optimizer_mxnet.py's (the C
  may contract a*b + c into one FMA, numpy and MXNet's build do not).
- The standalone training program trains with the table's values and maps --lr/--wd/--momentum to the
  entries the chosen update has.
"""
import json
import re
import subprocess
import warnings

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.optimizer import NUM_HYPER, UPDATES, FactorScheduler, MultiFactorScheduler, RMSProp, create
from mxcc_testing import DATA, ROOT, needs_gcc, rel_err

TOL = 1e-6
REF = DATA / "train_libs"
REF_FILES = ("optimizer_ref", "optimizer_rmsprop_ref")


def _declarations() -> dict[str, list[str]]:
    """{function: [parameter declarations]} of runtime_c/optim.h."""
    text = re.sub(r"/\*.*?\*/", "", (ROOT / "runtime_c" / "optim.h").read_text(), flags=re.S)
    return {m.group(1): [" ".join(p.split()) for p in m.group(2).split(",")]
            for m in re.finditer(r"void\s+(\w+)\s*\(([^)]*)\)\s*;", text)}


@pytest.mark.parametrize("kind", sorted(UPDATES))
def test_c_declaration_matches_the_table(kind):
    d = UPDATES[kind]
    want = (["float *w", "const float *g"] + [f"float *{s}" for s in d.states] + ["long n"]
            + [f"float {h.name}" for h in d.hyper])
    assert _declarations().get(d.c_fn) == want, f"runtime_c/optim.h: {d.c_fn} should take ({', '.join(want)})"


def test_ctx_hyper_holds_every_entry():
    m = re.search(r"#define\s+MXCC_NUM_HYPER\s+(\d+)", (ROOT / "runtime_c" / "mxcc_runtime.h").read_text())
    assert m and int(m.group(1)) >= NUM_HYPER == max(len(d.hyper) for d in UPDATES.values())


def test_defaults_are_mxnets():
    """A default optimizer's first update uses the table's defaults (Adam's lr before its bias correction):
    a value step_hyper leaves out means what MXNet's default means."""
    for opt in (create("sgd"), create("adam"), RMSProp(), RMSProp(centered=True)):
        assert UPDATES[opt.kind].values({}) == list(dict(opt.step_hyper(1), lr=opt.lr).values()), opt.kind


def test_values_fill_defaults_and_refuse_strangers():
    d = UPDATES["sgd_mom"]
    assert d.values({"lr": 0.5, "momentum": 0.9}) == [0.5, 0.0, 0.9, 1.0, -1.0]
    with pytest.raises(ValueError, match="beta1"):
        d.values({"lr": 0.5, "beta1": 0.9})


# -- the compiled update against MXNet ---------------------------------------------------------------------
def _cases():
    names, cases = None, {}
    for f in REF_FILES:
        spec = json.loads((REF / f"{f}.json").read_text())
        names = names or spec["names"]
        assert spec["names"] == names
        cases.update({c: dict(s, file=f, steps=spec["steps"]) for c, s in spec["cases"].items()})
    return names, cases


NAMES, CASES = _cases()


def _optimizer(case: dict):
    kw = dict(case["kwargs"])
    if "lr_scheduler" in kw:
        kind, args = kw["lr_scheduler"]
        kw["lr_scheduler"] = (FactorScheduler if kind == "factor" else MultiFactorScheduler)(**args)
    if case["set_wd_mult"] is not None or case["set_lr_mult"] is not None:
        kw["param_idx2name"] = dict(enumerate(NAMES))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)       # lr_scheduler base_lr overridden, as MXNet warns
        opt = create(case["optimizer"], **kw)
    if case["set_lr_mult"]:
        opt.set_lr_mult(case["set_lr_mult"])
    if case["set_wd_mult"]:
        opt.set_wd_mult({int(k): v for k, v in case["set_wd_mult"].items()})
    return opt


def _network(module_style: bool):
    """A net whose parameters are the reference's (fc_weight (7, 5), fc_bias (5,), conv_weight (3, 4, 2, 2),
    and `other` (5, 3), not checked), with the __lr_mult__/__wd_mult__ of MXNet's symbol when MXNet was
    given it (Module style); without it MXNet's get_updater reads no attributes, so neither does this net."""
    attrs = {}
    if module_style:
        attrs = {n.name: dict(n.attrs) for n in sym.load(REF / "optimizer_mults-symbol.json").graph.nodes
                 if n.is_variable}
    w, b, cw = (sym.var(n, attr=attrs.get(n)) for n in NAMES)
    fc = sym.FullyConnected(sym.var("data"), weight=w, num_hidden=7, no_bias=True, name="fc")
    fc2 = sym.FullyConnected(sym.var("data2"), weight=sym.var("other"), bias=b, num_hidden=5, name="fc2")
    conv = sym.Convolution(sym.var("img"), weight=cw, kernel=(2, 2), num_filter=3, no_bias=True, name="conv")
    return sym.Group([fc, fc2, conv])


@pytest.fixture(scope="module")
def arrays():
    out = {}
    for f in REF_FILES:
        with np.load(REF / f"{f}.npz") as a:
            out.update(a)
    return out


@needs_gcc
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_update_gives_mxnets_steps(case, arrays):
    """Each step from MXNet's weights and states (one-step error), as test_optimizer_mxnet.py checks numpy."""
    spec = CASES[case]
    opt = _optimizer(spec)
    exe = mxcc.compile(_network(bool(opt.idx2name)), {"data": (1, 5), "data2": (1, 3), "img": (1, 4, 3, 3)},
                       train=True, optimizer=opt, name="opt")
    assert UPDATES[opt.kind].c_fn in {k["function"] for k in exe.meta["kernels"] if k["phase"] == "update"}
    states = opt.state_names
    exe.set_params({**{n: arrays[f"{case}/init:{i}"] for i, n in enumerate(NAMES)},
                    "other": np.ones((5, 3), np.float32)})
    for t in range(spec["steps"]):
        for i, n in enumerate(NAMES):
            exe.grad_dict[n][...] = arrays[f"{case}/step{t}_grad:{i}"]
        exe.update()
        for i, n in enumerate(NAMES):
            ref_w = arrays[f"{case}/step{t}_weight:{i}"]
            assert rel_err(exe.arg_dict[n], ref_w) <= TOL, (t, n)
            exe.arg_dict[n][...] = ref_w
            for k, st in enumerate(states):
                ref_s = arrays[f"{case}/step{t}_state{k}:{i}"]
                assert rel_err(exe.state_dict[f"{n}_{st}"], ref_s) <= TOL, (t, n, st)
                exe.state_dict[f"{n}_{st}"][...] = ref_s


# -- the standalone training program -----------------------------------------------------------------------
@needs_gcc
def test_train_program_uses_the_table(tmp_path):
    """An RMSProp (centered) MLP trained by <net>_train learns; --lr and --wd set its lr and wd (the compiled
    lr 0.5 does not learn), --momentum, which it has no use for, is reported and ignored."""
    mnist = ROOT / "examples" / "data" / "mnist"
    x = sym.Activation(sym.FullyConnected(sym.var("X"), num_hidden=32, name="fc1"), act_type="relu")
    net = sym.SoftmaxOutput(sym.FullyConnected(x, num_hidden=10, name="fc2"), sym.var("label"), name="softmax")
    out = tmp_path / "mlp"
    mxcc.compile(net, {"X": (50, 784)}, train=True, optimizer=RMSProp(learning_rate=0.5, centered=True,
                                                                     clip_weights=1.0),
                 out_dir=out, name="mlp")
    r = subprocess.run([str(out / "mlp_train"), "--images", str(mnist / "t10k-images-idx3-ubyte.gz"), "--labels",
                        str(mnist / "t10k-labels-idx1-ubyte.gz"), "--epochs", "1", "--train", "2000", "--val", "500",
                        "--lr", "0.001", "--wd", "1e-4", "--momentum", "0.9", "--threads", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "--momentum ignored: the rmspropalex update has no such hyper-parameter" in r.stderr
    acc = [float(a) for a in re.findall(r"Accuracy: ([0-9.]+)", r.stdout)]
    assert len(acc) == 1 and acc[0] >= 0.7, r.stdout     # measured 0.786 (0.096 with the compiled lr 0.5)
