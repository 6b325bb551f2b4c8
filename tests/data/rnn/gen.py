"""Reference cases for mxcc's recurrent layers, made by the real Apache MXNet 1.9.1 (numpy 1.23.5, CPU pip build).

What a user exports: Gluon `rnn.LSTM` / `rnn.GRU` / `rnn.RNN` layers, hybridized and exported
(HybridBlock.export), so the JSON holds exactly what MXNet writes: `RNN`, `_rnn_param_concat` of the per-gate
weights (each `Reshape(shape=-1)`), `_zeros(shape=(L, 0, H))` default begin states (the batch left to shape
inference), `SwapAxis` around NTC layers; plus one plain `mx.sym.RNN` (only the attributes given: default
state_outputs=False, one output) and the small ops alone (SwapAxis, _rnn_param_concat, _zeros, _ones,
zeros_like, ones_like). Files, as tests/data/mxnet_extra:

  cases/<case>-symbol.json   the symbol as MXNet wrote it
  cases/<case>.npz           arg:<name>       every argument fed to the executor (inputs and parameters)
                             out:<i>          forward output i (Symbol.list_outputs() order)
                             head_grad:<i>    the head gradient given for output i
                             grad:<name>      the gradient of every argument whose grad_req is 'write'
  manifest.json              one record per case: inputs (fed per call), arguments and shapes, grad_req,
                             outputs, the ops in the JSON, a note, `onednn_vs_native`: how far MXNet's
                             oneDNN kernels are from the native ones on this case (max|a - b| / max|b|), and
                             `float64_check`: the outputs against an independent float64 numpy interpreter of
                             the JSON (np_graph, np_rnn: max|a - b| / max|b|) and MXNet's gradients against a
                             directional finite difference of it (sum_i <head_i, out_i> along a random v)

Protocol: ex = sym.simple_bind(mx.cpu(), grad_req=..., **shapes); set every argument; outs =
ex.forward(is_train=True); ex.backward(out_grads=[head_grad:<i>...]). With p = 0 the RNN's training and
inference forwards are the same function. The RNN references are made by MXNet's native CPU RNN kernels
(rnn_impl.h), chosen with MXNET_USE_MKLDNN_RNN=0 (set before mxnet is imported): MXNET_MKLDNN_ENABLED=0, the
usual switch, makes MXNet 1.9.1's RNN fail ("Check failed: in_data.size() == num_inputs (4 vs. 3)"), so the
other ops of these graphs (FullyConnected, Embedding) run oneDNN's kernels. The oneDNN RNN numbers come from a
second run of this script in a child process (`--onednn <file>`, which writes outputs and gradients only).

Run with MXNet's own interpreter from the repository root (mxcc's tests never import mxnet):

    /tmp/mxvenv/bin/python tests/data/rnn/gen.py
"""
import json
import os
import subprocess
import sys
import tempfile
import zlib
import logging

ONEDNN = "--onednn" in sys.argv
os.environ["MXNET_USE_MKLDNN_RNN"] = "1" if ONEDNN else "0"
os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
logging.getLogger().setLevel(logging.ERROR)

import numpy as np  # noqa: E402
import mxnet as mx  # noqa: E402
from mxnet import gluon  # noqa: E402
from mxnet.gluon import nn, rnn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_DIR = os.path.join(HERE, "cases")
S = mx.sym


def rng_for(name, base=0):
    return np.random.RandomState((zlib.crc32(name.encode("utf-8")) + base) % (2 ** 31))


def env_info():
    return {"mxnet_version": mx.__version__, "numpy_version": np.__version__, "python": sys.version.split()[0],
            "features_enabled": sorted(k for k, v in mx.runtime.Features().items() if v.enabled),
            "env": {k: os.environ.get(k) for k in ["OMP_NUM_THREADS", "MXNET_MKLDNN_ENABLED", "MXNET_USE_MKLDNN_RNN"]}}


def json_ops(sym_json):
    counts = {}
    for n in sym_json["nodes"]:
        if n["op"] != "null":
            counts[n["op"]] = counts.get(n["op"], 0) + 1
    return dict(sorted(counts.items()))


def run_executor(sym, args, grad_req, head_grads):
    """simple_bind, set args, forward(is_train=True), backward(head_grads): (outputs, grads) as numpy."""
    ex = sym.simple_bind(mx.cpu(), grad_req=grad_req, **{k: v.shape for k, v in args.items()})
    for k, v in args.items():
        ex.arg_dict[k][:] = v
    outs = [o.asnumpy().copy() for o in ex.forward(is_train=True)]
    ex.backward(out_grads=[mx.nd.array(h) for h in head_grads])
    mx.nd.waitall()
    grads = {k: ex.grad_dict[k].asnumpy().copy() for k, r in grad_req.items() if r != "null"}
    return outs, grads


def export(block, inputs, name):
    """Initialize, hybridize, run once on `inputs` and export: (symbol JSON text, {param name: array})."""
    block.hybridize()
    block(*[mx.nd.array(x) for x in inputs])
    with tempfile.TemporaryDirectory() as tmp:
        block.export(os.path.join(tmp, name))
        text = open(os.path.join(tmp, name + "-symbol.json")).read()
        loaded = mx.nd.load(os.path.join(tmp, name + "-0000.params"))
        params = {k.split(":", 1)[1]: v.asnumpy() for k, v in loaded.items()}
    return text, params


MANIFEST = {"generator": "tests/data/rnn/gen.py", "environment": None, "protocol": __doc__, "cases": {}}
RESULTS = {}      # case -> arrays (outputs and gradients), for the oneDNN comparison


def case(name, sym_json, inputs, params, grad_inputs=(), note="", heads=None):
    """Run the protocol on `sym_json` with `inputs` (fed per call) and `params`; every parameter and the
    inputs in grad_inputs get gradients."""
    sym = mx.sym.load_json(sym_json)
    args = {k: np.asarray(v, np.float32) for k, v in {**inputs, **params}.items()}
    missing = set(sym.list_arguments()) - set(args)
    assert not missing, missing
    args = {k: args[k] for k in sym.list_arguments()}
    grad_req = {k: ("write" if k in params or k in grad_inputs else "null") for k in args}
    _, out_shapes, _ = sym.infer_shape(**{k: v.shape for k, v in args.items()})
    rng = rng_for(name, 11)
    heads = heads or [rng.normal(0, 1, size=s).astype(np.float32) for s in out_shapes]
    outs, grads = run_executor(sym, args, grad_req, heads)
    arrays = {"arg:" + k: v for k, v in args.items()}
    arrays.update({"out:%d" % i: o for i, o in enumerate(outs)})
    arrays.update({"head_grad:%d" % i: h for i, h in enumerate(heads)})
    arrays.update({"grad:" + k: g for k, g in grads.items()})
    RESULTS[name] = {k: v for k, v in arrays.items() if k.startswith(("out:", "grad:"))}
    if ONEDNN:
        return
    f64 = np_graph(sym_json, args)
    forward = max(float(np.abs(o - r).max() / (np.abs(r).max() or 1.0)) for o, r in zip(outs, f64))
    assert forward < 1e-5, (name, forward)
    check = fd_check(name, lambda a: sum(float((h * o).sum()) for h, o in zip(heads, np_graph(sym_json, a))),
                     args, grads)
    assert check["relative_difference"] < 1e-4, (name, check)
    os.makedirs(CASES_DIR, exist_ok=True)
    with open(os.path.join(CASES_DIR, name + "-symbol.json"), "w") as f:
        f.write(sym_json)
    np.savez_compressed(os.path.join(CASES_DIR, name + ".npz"),
                        **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    MANIFEST["cases"][name] = dict(
        ops_in_json=json_ops(json.loads(sym_json)), outputs=sym.list_outputs(), inputs=sorted(inputs),
        arguments={k: list(v.shape) for k, v in args.items()}, grad_req=grad_req, note=note,
        float64_check={"forward": forward, "gradients": check},
        files={"symbol": "cases/%s-symbol.json" % name, "arrays": "cases/%s.npz" % name})
    print("ok", name)


# -- an independent float64 check: numpy RNN forward, directional derivative vs MXNet's gradients ------------
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def np_rnn(mode, L, D, H, x, w, h0, c0):
    """MXNet's RNN in float64 numpy: x (T, N, I), the packed vector w (all weights of every layer and
    direction: i2h (G*H, I_l), h2h (G*H, H); then all biases: i2h, h2h), h0/c0 (L*D, N, H) -> y, hy, cy."""
    T, N, I = x.shape
    G = GATES[mode]
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    off, mats = 0, []
    for l in range(L):
        for d in range(D):
            In = I if l == 0 else D * H
            wx = w[off:off + G * H * In].reshape(G * H, In); off += G * H * In
            wh = w[off:off + G * H * H].reshape(G * H, H); off += G * H * H
            mats.append([wx, wh])
    for m in mats:
        m += [w[off:off + G * H], w[off + G * H:off + 2 * G * H]]
        off += 2 * G * H
    assert off == w.size
    hy, cy = np.zeros((L * D, N, H)), np.zeros((L * D, N, H))
    inp = x
    for l in range(L):
        outs = []
        for d in range(D):
            wx, wh, bx, bh = mats[l * D + d]
            h, c = h0[l * D + d], (c0[l * D + d] if c0 is not None else None)
            ys = [None] * T
            for t in (range(T) if d == 0 else reversed(range(T))):
                a, b = inp[t] @ wx.T + bx, h @ wh.T + bh
                if mode == "lstm":
                    i, f, g, o = np.split(a + b, 4, axis=1)
                    c = sig(f) * c + sig(i) * np.tanh(g)
                    h = sig(o) * np.tanh(c)
                elif mode == "gru":
                    (ar, az, an), (br, bz, bn) = np.split(a, 3, axis=1), np.split(b, 3, axis=1)
                    r, z = sig(ar + br), sig(az + bz)
                    n = np.tanh(an + r * bn)
                    h = (1 - z) * n + z * h
                else:
                    h = np.tanh(a + b) if mode == "rnn_tanh" else np.maximum(a + b, 0)
                ys[t] = h
            hy[l * D + d] = h
            if c is not None:
                cy[l * D + d] = c
            outs.append(np.stack(ys))
        inp = np.concatenate(outs, axis=2)
    return inp, hy, cy


def np_graph(sym_json, args):
    """The outputs of the symbol in float64 numpy, for the ops these cases use (a `_zeros` with a deferred
    dimension is None: the RNN reads it as zeros)."""
    js = json.loads(sym_json)
    vals = []
    for node in js["nodes"]:
        op, a = node["op"], node.get("attrs", {})
        ins = [vals[i][j] for i, j, *_ in node["inputs"]]
        if op == "null":
            out = [args[node["name"]].astype(np.float64)]
        elif op == "Reshape":
            out = [ins[0].reshape(eval(a["shape"]))]
        elif op in ("_rnn_param_concat", "Concat"):
            out = [np.concatenate(ins, axis=int(a.get("dim", 1)))]
        elif op in ("_zeros", "_ones"):
            shape = eval(a["shape"])
            out = [None if 0 in shape else np.full(shape, 0.0 if op == "_zeros" else 1.0)]
        elif op in ("zeros_like", "ones_like"):
            out = [np.full(ins[0].shape, 0.0 if op == "zeros_like" else 1.0)]
        elif op == "SwapAxis":
            out = [np.swapaxes(ins[0], int(a.get("dim1", 0)), int(a.get("dim2", 0)))]
        elif op == "Embedding":
            out = [ins[1][np.clip(ins[0].astype(np.int64), 0, int(a["input_dim"]) - 1)]]
        elif op == "FullyConnected":
            assert a.get("flatten") == "False"
            out = [ins[0] @ ins[1].T + (ins[2] if len(ins) > 2 else 0)]
        elif op == "elemwise_add":
            out = [ins[0] + ins[1]]
        elif op == "elemwise_mul":
            out = [ins[0] * ins[1]]
        elif op == "_mul_scalar":
            out = [ins[0] * float(a["scalar"])]
        elif op == "RNN":
            mode, H, L = a["mode"], int(a["state_size"]), int(a["num_layers"])
            D = 2 if a.get("bidirectional") == "True" else 1
            x = ins[0]
            zeros = np.zeros((L * D, x.shape[1], H))
            h0 = zeros if ins[2] is None else ins[2]
            c0 = (zeros if ins[3] is None else ins[3]) if mode == "lstm" else None
            y, hy, cy = np_rnn(mode, L, D, H, x, ins[1], h0, c0)
            out = [y] + ([hy] + ([cy] if mode == "lstm" else []) if a.get("state_outputs") == "True" else [])
        else:
            raise NotImplementedError(op)
        vals.append(out)
    return [vals[i][j] for i, j, *_ in js["heads"]]


def fd_check(name, f, args, grads, eps=1e-5):
    """<grad, v> vs (f(args + eps v) - f(args - eps v)) / 2 eps in float64 for a random direction v over the
    arguments with gradients; f(args) = sum_i <head_i, out_i>."""
    rng = rng_for(name, 13)
    v = {k: rng.normal(0, 1, size=args[k].shape) for k in grads}
    def shifted(sgn):
        return {k: a.astype(np.float64) + (sgn * eps * v[k] if k in v else 0) for k, a in args.items()}
    fd = (f(shifted(1)) - f(shifted(-1))) / (2 * eps)
    ref = sum(float((grads[k].astype(np.float64) * v[k]).sum()) for k in v)
    return {"finite_difference": fd, "reference": ref, "relative_difference": abs(fd - ref) / (abs(fd) or 1.0)}


def tokens(name, shape, vocab):
    return rng_for(name, 3).randint(0, vocab, size=shape).astype(np.float32)


def uniform(name, shape, k=1.0, base=5):
    return rng_for(name, base).uniform(-k, k, size=shape).astype(np.float32)


def set_params(block, name, scale=0.4):
    """Every parameter uniform(-scale, scale), biases too (Gluon's default biases are zeros)."""
    rng = rng_for(name, 1)
    for p in block.collect_params().values():
        p.set_data(mx.nd.array(rng.uniform(-scale, scale, size=p.shape).astype(np.float32)))


# -- the language model: Embedding -> 2-layer LSTM -> Dense -----------------------------------------------
class LM(gluon.HybridBlock):
    """A word-level language model. Without states the LSTM's begin states are Gluon's default,
    `_zeros(shape=(2, 0, H))`; with states they are inputs and the final states are outputs too."""

    def __init__(self, vocab, embed, hidden, layers, states, **kw):
        super().__init__(**kw)
        self.states = states
        with self.name_scope():
            self.emb = nn.Embedding(vocab, embed)
            self.lstm = rnn.LSTM(hidden, num_layers=layers, input_size=embed)
            self.out = nn.Dense(vocab, flatten=False, in_units=hidden)

    def hybrid_forward(self, F, x, *states):
        if self.states:
            y, (h, c) = self.lstm(self.emb(x), list(states))
            return self.out(y), h, c
        return self.out(self.lstm(self.emb(x)))


def lm_cases():
    V, E, H, L, T, N = 40, 12, 16, 2, 6, 3
    for name, with_states in (("lstm_lm", False), ("lstm_lm_states", True)):
        block = LM(V, E, H, L, with_states, prefix="lm_")
        block.initialize()
        set_params(block, name)
        x = tokens(name, (T, N), V)
        ins = [x]
        if with_states:
            ins += [uniform(name, (L, N, H), 0.5, 6), uniform(name, (L, N, H), 0.5, 7)]
        text, params = export(block, ins, name)
        names = [n["name"] for n in json.loads(text)["nodes"] if n["op"] == "null" and n["name"] not in params]
        case(name, text, dict(zip(names, ins)), params, grad_inputs=names[1:],
             note="Embedding(%d, %d) -> LSTM(%d, num_layers=%d, TNC) -> Dense(%d, flatten=False), T=%d N=%d; %s"
                  % (V, E, H, L, V, T, N, "begin states given (data1, data2) and final states returned"
                     if with_states else "Gluon's default begin states (_zeros with a deferred batch)"))


# -- single layers: GRU, vanilla tanh/relu RNN, bidirectional LSTM ------------------------------------------
class Wrap(gluon.HybridBlock):
    """A Gluon RNN layer called symbolically with no states: its default begin states are `_zeros`."""

    def __init__(self, layer, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.layer = layer

    def hybrid_forward(self, F, x):
        return self.layer(x)


def layer_case(name, layer, layout, T, N, I, begin_states, note):
    """`layer` exported alone (begin states given: net(x, states), the states are inputs and the new states
    outputs) or wrapped (no states: `_zeros` begin states, one output); data gradients too."""
    block = layer if begin_states else Wrap(layer, prefix="w_")
    block.initialize()
    set_params(block, name)
    x = uniform(name, (T, N, I) if layout == "TNC" else (N, T, I))
    ins = [x]
    if begin_states:
        ins += [uniform(name, info["shape"], 0.5, 6 + i) for i, info in enumerate(layer.state_info(N))]
        layer.hybridize()
        layer(mx.nd.array(x), [mx.nd.array(s) for s in ins[1:]])
        with tempfile.TemporaryDirectory() as tmp:
            layer.export(os.path.join(tmp, name))
            text = open(os.path.join(tmp, name + "-symbol.json")).read()
            params = {k.split(":", 1)[1]: v.asnumpy()
                      for k, v in mx.nd.load(os.path.join(tmp, name + "-0000.params")).items()}
    else:
        text, params = export(block, ins, name)
    names = [n["name"] for n in json.loads(text)["nodes"] if n["op"] == "null" and n["name"] not in params]
    case(name, text, dict(zip(names, ins)), params, grad_inputs=names, note=note)


def layer_cases():
    layer_case("gru_bi_ntc", rnn.GRU(10, num_layers=2, bidirectional=True, layout="NTC", input_size=7),
               "NTC", T=5, N=3, I=7, begin_states=True,
               note="GRU(10, num_layers=2, bidirectional, NTC), begin state given, final state returned")
    layer_case("rnn_tanh", rnn.RNN(9, num_layers=2, activation="tanh", input_size=5), "TNC", T=6, N=2, I=5,
               begin_states=False, note="RNN(9, num_layers=2, tanh, TNC), default begin state (_zeros)")
    layer_case("rnn_relu_bi_ntc", rnn.RNN(8, activation="relu", bidirectional=True, layout="NTC", input_size=6),
               "NTC", T=4, N=3, I=6, begin_states=False,
               note="RNN(8, relu, bidirectional, NTC), default begin state (_zeros)")
    layer_case("lstm_bi_ntc", rnn.LSTM(7, num_layers=2, bidirectional=True, layout="NTC", input_size=5),
               "NTC", T=5, N=2, I=5, begin_states=False,
               note="LSTM(7, num_layers=2, bidirectional, NTC), default begin states (_zeros)")
    layer_case("gru_states", rnn.GRU(6, input_size=4), "TNC", T=7, N=1, I=4, begin_states=True,
               note="GRU(6, TNC), batch 1, begin state given, final state returned")
    layer_case("gru_one_step", rnn.GRU(5, num_layers=2, bidirectional=True, input_size=3), "TNC", T=1, N=2, I=3,
               begin_states=False, note="GRU(5, num_layers=2, bidirectional, TNC), one step, default begin state")
    layer_case("lstm_wide", rnn.LSTM(130, input_size=5), "TNC", T=3, N=9, I=5, begin_states=True,
               note="LSTM(130, TNC), batch 9 (the step GEMM on packed h2h panels), 130 hidden (a row in two "
                    "blocks of columns, a partial vector), begin states given, final states returned")


def sym_case():
    """mx.sym.RNN with only the required attributes (state_outputs=False: one output) and the packed
    parameter vector as one variable."""
    name, T, N, I, H = "sym_lstm", 4, 2, 3, 5
    data, params, state, cell = S.var("data"), S.var("params"), S.var("state"), S.var("cell")
    y = S.RNN(data, params, state, cell, mode="lstm", state_size=H, num_layers=1, name="rnn")
    psize = 4 * H * (I + H + 2)
    ins = {"data": uniform(name, (T, N, I)), "state": uniform(name, (1, N, H), 0.5, 6),
           "cell": uniform(name, (1, N, H), 0.5, 7)}
    case(name, y.tojson(), ins, {"params": uniform(name, (psize,), 0.4, 8)}, grad_inputs=sorted(ins),
         note="mx.sym.RNN(mode='lstm', state_size=%d, num_layers=1), attributes left at their defaults" % H)


# -- the small ops ------------------------------------------------------------------------------------------
def small_cases():
    a = S.var("a")
    for name, d1, d2 in (("swapaxis_0_1", 0, 1), ("swapaxis_neg", -1, 0), ("swapaxis_1_3", 1, 3),
                         ("swapaxis_same", 2, 2)):
        y = S.SwapAxis(a, dim1=d1, dim2=d2, name="op")
        case(name, y.tojson(), {"a": uniform(name, (2, 3, 4, 5))}, {}, grad_inputs=["a"],
             note="SwapAxis(dim1=%d, dim2=%d) of a (2, 3, 4, 5)" % (d1, d2))
    name = "rnn_param_concat"
    w = [S.var("w%d" % i) for i in range(3)]
    y = S._internal._rnn_param_concat(S.Reshape(w[0], shape=-1), S.Reshape(w[1], shape=-1), w[2], dim=0,
                                       num_args=3, name="op")
    case(name, y.tojson(), {}, {"w0": uniform(name, (4, 3)), "w1": uniform(name, (2, 5), 1, 6),
                                "w2": uniform(name, (7,), 1, 7)},
         note="_rnn_param_concat(dim=0) of two flattened matrices and a vector")
    name = "init_ops"
    z, o = S.zeros(shape=(2, 3), name="z"), S.ones(shape=(2, 3), name="o")
    y = S.Group([z, o, (a * S.ones_like(a, name="ol") + S.zeros_like(a, name="zl")) * 2 + z + o])
    case(name, y.tojson(), {"a": uniform(name, (2, 3))}, {}, grad_inputs=["a"],
         note="_zeros, _ones (shape (2, 3)), and a * ones_like(a) + zeros_like(a), times 2, plus both")


def onednn_comparison():
    """Run this script with oneDNN in a child process; record max|onednn - native| / max|native| per case."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "onednn.npz")
        subprocess.run([sys.executable, os.path.abspath(__file__), "--onednn", out], check=True)
        other = np.load(out)
    for name, arrays in RESULTS.items():
        worst = {}
        for k, ref in arrays.items():
            scale = float(np.abs(ref).max()) or 1.0
            worst[k] = float(np.abs(other["%s/%s" % (name, k)].astype(np.float64) - ref).max()) / scale
        MANIFEST["cases"][name]["onednn_vs_native"] = {
            "outputs": max(v for k, v in worst.items() if k.startswith("out:")),
            "gradients": max([v for k, v in worst.items() if k.startswith("grad:")] or [0.0])}


def main():
    mx.random.seed(0)
    lm_cases()
    layer_cases()
    sym_case()
    small_cases()
    if ONEDNN:
        np.savez(sys.argv[sys.argv.index("--onednn") + 1],
                 **{"%s/%s" % (c, k): v for c, arrays in RESULTS.items() for k, v in arrays.items()})
        return
    onednn_comparison()
    MANIFEST["environment"] = env_info()
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(MANIFEST, f, indent=1, sort_keys=False)
        f.write("\n")


if __name__ == "__main__":
    main()
