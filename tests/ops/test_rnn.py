"""RNN (LSTM, GRU, vanilla tanh/relu; stacked, bidirectional, TNC and NTC, with and without begin states),
_rnn_param_concat, SwapAxis and the fills (_zeros, _ones, zeros_like, ones_like) against MXNet 1.9.1
(tests/data/rnn, made by its gen.py from exported Gluon layers: MXNet's native RNN kernels; the manifest
records how far its oneDNN ones are, up to 4e-7, and an independent float64 check of every reference).

MXNet's protocol as gen.py ran it: a training build (poisoning: memory no kernel wrote reads as NaN) with the
case's grad_req, forward(is_train=True), backward(out_grads=head_grad:*); and an inference build's forward.
To keep compile time down every case goes into one graph (node names prefixed `c<i>_`), compiled once for
inference and once for training. Tolerances: outputs max|got - ref| <= 1e-5 * max|ref| (the references'
README for single ops), gradients <= 1e-4 * max|ref| (this op's brief); mxcc reaches 3e-7 on both (float32
rounding: different summation orders in the GEMMs, vectorized sigmoid/tanh of about 1-2 ulp).
"""
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import AttrError, ShapeError, UnsupportedOpError
from mxcc.graph import load_json
from mxcc.graph.ir import Graph
from mxcc.ops.rnn import Geometry, RNNAttrs
from mxcc_testing import DATA, SGD0, build_isa_libs, needs_gcc, rel_err

RNN_DATA = DATA / "rnn"
MANIFEST = json.loads((RNN_DATA / "manifest.json").read_text())["cases"]
CASES = list(MANIFEST)
FORWARD_TOL, GRAD_TOL = 1e-5, 1e-4


def _case(name):
    """(arrays, the names fed per call: a case without inputs feeds all its arguments)."""
    case = MANIFEST[name]
    return np.load(RNN_DATA / case["files"]["arrays"]), case["inputs"] or list(case["arguments"])


def _merged(names) -> Graph:
    """The cases' graphs side by side in one graph, every node name prefixed with `c<i>_`."""
    nodes, heads, attrs = [], [], ()
    for i, name in enumerate(names):
        g = load_json(RNN_DATA / MANIFEST[name]["files"]["symbol"])
        base, pre = len(nodes), f"c{i}_"
        nodes += [replace(n, id=base + n.id, name=pre + n.name,
                          inputs=tuple(replace(r, node=base + r.node) for r in n.inputs)) for n in g.nodes]
        heads += [replace(h, node=base + h.node) for h in g.heads]
        attrs = g.attrs
    return Graph(nodes=tuple(nodes), heads=tuple(heads), attrs=attrs)


def _bindings(names):
    """Shapes, params and inputs of the merged graph; the outputs' slices per case."""
    shapes, params, inputs, spans, grad_req = {}, {}, {}, {}, {}
    at = 0
    for i, name in enumerate(names):
        a, fed = _case(name)
        pre = f"c{i}_"
        for k in a.files:
            if k.startswith("arg:"):
                (inputs if k[4:] in fed else params)[pre + k[4:]] = a[k]
        shapes.update({pre + k: a[f"arg:{k}"].shape for k in fed})
        grad_req.update({pre + k: r for k, r in MANIFEST[name]["grad_req"].items()})
        n = len(MANIFEST[name]["outputs"])
        spans[name] = (at, at + n)
        at += n
    return shapes, params, inputs, spans, grad_req


# outputs that do not depend on an argument with a gradient get no head gradient (init_ops: _zeros, _ones)
NO_HEAD = {"init_ops": (0, 1)}


@pytest.fixture(scope="module")
def inference():
    shapes, params, inputs, spans, _ = _bindings(CASES)
    outs = mxcc.compile(_merged(CASES), shapes, params, name="rnn_cases").forward(**inputs)
    return {name: outs[lo:hi] for name, (lo, hi) in spans.items()}


@pytest.fixture(scope="module")
def training():
    shapes, params, inputs, spans, grad_req = _bindings(CASES)
    exe = mxcc.compile(_merged(CASES), shapes, params, train=True, optimizer=SGD0(), grad_req=grad_req,
                       poison=True, name="rnn_cases_train")
    outs = [o.copy() for o in exe.forward(is_train=True, **inputs)]
    heads = []
    for i, name in enumerate(CASES):
        a, _ = _case(name)
        heads += [a[f"head_grad:{j}"] for j in range(len(MANIFEST[name]["outputs"])) if j not in NO_HEAD.get(name, ())]
    exe.backward(heads)
    grads = {k: v.copy() for k, v in exe.grad_dict.items()}
    return {name: (outs[lo:hi], {k[len(f"c{i}_"):]: g for k, g in grads.items() if k.startswith(f"c{i}_")})
            for i, (name, (lo, hi)) in enumerate(spans.items())}


@needs_gcc
@pytest.mark.parametrize("name", CASES)
def test_forward(name, inference):
    a, _ = _case(name)
    outs = inference[name]
    assert len(outs) == len(MANIFEST[name]["outputs"])
    for i, o in enumerate(outs):
        assert o.shape == a[f"out:{i}"].shape
        assert rel_err(o, a[f"out:{i}"]) <= FORWARD_TOL, f"output {i}"


@needs_gcc
@pytest.mark.parametrize("name", CASES)
def test_gradients(name, training):
    a, _ = _case(name)
    outs, grads = training[name]
    for i, o in enumerate(outs):
        assert rel_err(o, a[f"out:{i}"]) <= FORWARD_TOL, f"training output {i}"
    want = [k for k, r in MANIFEST[name]["grad_req"].items() if r == "write"]
    assert want and sorted(grads) == sorted(want)
    for k in want:
        assert rel_err(grads[k], a[f"grad:{k}"]) <= GRAD_TOL, k


@needs_gcc
def test_gradient_after_an_inference_forward():
    """A training build's backward after forward(is_train=False) differentiates the inference function: the RNN
    recomputes its forward keeping the reserve (with p = 0 the same gradients as MXNet's)."""
    name = "lstm_bi_ntc"
    a, fed = _case(name)
    shapes = {k: a[f"arg:{k}"].shape for k in fed}
    params = {k[4:]: a[k] for k in a.files if k.startswith("arg:") and k[4:] not in fed}
    exe = mxcc.compile(RNN_DATA / MANIFEST[name]["files"]["symbol"], shapes, params, train=True, optimizer=SGD0(),
                       inputs_need_grad=True, poison=True)
    out = exe.forward(is_train=False, **{k: a[f"arg:{k}"] for k in fed})
    assert rel_err(out[0], a["out:0"]) <= FORWARD_TOL
    exe.backward([a["head_grad:0"]])
    for k, r in MANIFEST[name]["grad_req"].items():
        if r == "write":
            assert rel_err(exe.grad_dict[k], a[f"grad:{k}"]) <= GRAD_TOL, k


def test_packed_parameter_layout():
    """Geometry's offsets walk MXNet's packed vector in the order Gluon concatenates its weights: every
    weight of every layer and direction (i2h, h2h), then every bias."""
    for name in ("lstm_lm", "gru_bi_ntc", "rnn_relu_bi_ntc", "lstm_bi_ntc"):
        js = json.loads((RNN_DATA / MANIFEST[name]["files"]["symbol"]).read_text())
        nodes = js["nodes"]
        concat = next(n for n in nodes if n["op"] == "_rnn_param_concat")
        rnn = next(n for n in nodes if n["op"] == "RNN")
        a = RNNAttrs(state_size=int(rnn["attrs"]["state_size"]), num_layers=int(rnn["attrs"]["num_layers"]),
                     mode=rnn["attrs"]["mode"], bidirectional=rnn["attrs"]["bidirectional"] == "True")
        data_arg = [n["name"] for n in nodes if n["op"] == "null"]
        weights = [nodes[nodes[i]["inputs"][0][0]]["name"] for i, *_ in concat["inputs"]]
        shapes = MANIFEST[name]["arguments"]
        i2h = shapes[weights[0]]
        g = Geometry.of(a, (5, 3, i2h[1]))
        offsets = [off for l, d in g.pairs() for off in g.weights(l, d)] + \
                  [off for l, d in g.pairs() for off in g.biases(l, d)]
        sizes = [int(np.prod(shapes[w])) for w in weights]
        assert offsets == list(np.cumsum([0] + sizes[:-1])), name
        assert g.param_size == sum(sizes) and data_arg


@needs_gcc
@pytest.mark.parametrize("march", ["native", "x86-64"])
def test_gate_functions_against_libm(march, tmp_path):
    """vmath.h's sigmoid, tanh and exp (the build's vector, and the plain-C build) vs float64 numpy: about
    1-2 ulp (relative 3e-7) where the result is a normal float, NaN in -> NaN out."""
    runtime = Path(__file__).resolve().parents[2] / "runtime_c"      # the checkout's, as the other runtime tests
    libs = build_isa_libs(tmp_path, "rnn", [runtime / "rnn" / "rnn_f32.c"], [march], runtime)
    if march not in libs:
        pytest.skip(f"this CPU cannot run -march={march} code")
    cffi = pytest.importorskip("cffi")
    ffi = cffi.FFI()
    ffi.cdef("void mxcc_rnn_act_f32(int which, const float *x, float *y, long n);")
    lib = ffi.dlopen(str(libs[march]), ffi.RTLD_LAZY)     # alone: the GEMM it calls elsewhere is not linked
    x = np.concatenate([np.linspace(-87, 88, 200003), [-1e-30, 0.0, 1e-30, 0.3, -0.3]]).astype(np.float32)
    x64 = x.astype(np.float64)
    refs = [1 / (1 + np.exp(-x64)), np.tanh(x64), np.exp(x64)]
    for which, ref in enumerate(refs):
        y = np.empty_like(x)
        lib.mxcc_rnn_act_f32(which, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y), x.size)
        keep = np.abs(ref) > 1e-30
        assert np.max(np.abs(y[keep] - ref[keep]) / np.abs(ref[keep])) <= 3e-7, which
        nan = np.array([np.nan] * 17, np.float32)
        lib.mxcc_rnn_act_f32(which, ffi.from_buffer("float[]", nan), ffi.from_buffer("float[]", nan), nan.size)
        assert np.isnan(nan).all()


def _lstm(name="rnn", **kw):
    return sym.RNN(sym.var("data"), sym.var("params"), sym.var("state"), sym.var("cell"), name=name, mode="lstm",
                   state_size=4, num_layers=1, **kw)


def test_refused_attributes_name_the_node():
    for kw, what in (({"projection_size": 2}, "projection_size"), ({"lstm_state_clip_min": -1.0,
                     "lstm_state_clip_max": 1.0}, "clip"), ({"use_sequence_length": True}, "use_sequence_length")):
        with pytest.raises(AttrError, match=f"lstm0 .RNN.: .*{what}"):
            mxcc.compile(_lstm("lstm0", **kw), {"data": (3, 2, 5)})


def test_shape_errors_name_the_node_and_input():
    with pytest.raises(ShapeError, match=r"lstm1 \(RNN\): input 'state' has shape \(2, 2, 4\), expected \(1, 2, 4\)"):
        mxcc.compile(_lstm("lstm1"), {"data": (3, 2, 5), "state": (2, 2, 4)})
    with pytest.raises(ShapeError, match=r"lstm2 \(RNN\): input 'data' must be \(steps, batch, features\)"):
        mxcc.compile(_lstm("lstm2"), {"data": (3, 5)})
    with pytest.raises(ShapeError, match=r"ones0 \(_ones\): shape \(2, 0, 4\) has a 0"):
        mxcc.compile(sym.elemwise_add(sym.var("a"), sym._ones(shape=(2, 0, 4), name="ones0")), {"a": (2, 3, 4)})


@needs_gcc
def test_training_with_dropout_between_layers_is_refused():
    net = sym.RNN(sym.var("data"), sym.var("params"), sym.var("state"), name="gru0", mode="gru", state_size=3,
                  num_layers=2, p=0.5)
    shapes = {"data": (3, 2, 5)}
    with pytest.raises(UnsupportedOpError, match=r"gru0 \(RNN\): training with dropout between layers"):
        mxcc.compile(net, shapes, train=True, optimizer=SGD0())
    params = {"params": np.zeros(3 * 3 * (5 + 3 + 2) + 3 * 3 * (3 + 3 + 2), np.float32),
              "state": np.zeros((2, 2, 3), np.float32)}
    out = mxcc.compile(net, {**shapes, "state": (2, 2, 3)}, {"params": params["params"]}).forward(
        data=np.ones((3, 2, 5), np.float32), state=params["state"])
    assert out[0].shape == (3, 2, 3)          # inference ignores p, as MXNet does


@needs_gcc
def test_generated_code(tmp_path):
    """One runtime call per layer and direction with constant sizes; batch 1 inference reads h2h panels packed
    at bind time (one-row step GEMM), training packs them once per call; the zero begin state is not read."""
    name = "lstm_lm"
    a, fed = _case(name)
    params = {k[4:]: a[k] for k in a.files if k.startswith("arg:") and k[4:] not in fed}
    mxcc.compile(RNN_DATA / MANIFEST[name]["files"]["symbol"], {"data": (6, 1)}, params, out_dir=tmp_path / "i",
                 name="lm")
    c = (tmp_path / "i" / "lm.c").read_text()
    assert c.count("mxcc_rnn_lstm_f32(ctx->gemm, &(mxcc_rnn_layer){") == 2
    assert ".step = MXCC_RNN_STEP_PACKED_ROW" in c and ".wh_packed = parameters_packed" in c
    assert ".h0 = NULL, .c0 = NULL" in c and "mxcc_gemm_pack_b_f32(MXCC_TRANS, 16, 64, src" in c
    mxcc.compile(RNN_DATA / MANIFEST[name]["files"]["symbol"], {"data": (6, 3)}, params, out_dir=tmp_path / "t",
                 name="lm", train=True, optimizer=SGD0())
    c = (tmp_path / "t" / "lm.c").read_text()
    # the training backward and that of the inference function (backward after forward(is_train=False))
    assert c.count("mxcc_rnn_lstm_backward_f32(ctx->gemm, &(mxcc_rnn_layer_grad){") == 4
    assert ".step = MXCC_RNN_STEP_GEMM" in c and ".wh_pack = NULL" in c


def _np_lstm(x, w, h0, c0, L, D, H):
    """A float64 numpy LSTM in MXNet's packed layout (every weight, then every bias): y, hy, cy."""
    T, N, I = x.shape
    sig = lambda v: 1 / (1 + np.exp(-v))   # noqa: E731
    off, mats = 0, []
    for l in range(L):
        for d in range(D):
            k = I if l == 0 else D * H
            wx, off = w[off:off + 4 * H * k].reshape(4 * H, k), off + 4 * H * k
            wh, off = w[off:off + 4 * H * H].reshape(4 * H, H), off + 4 * H * H
            mats.append([wx, wh])
    for m in mats:
        m += [w[off:off + 4 * H], w[off + 4 * H:off + 8 * H]]
        off += 8 * H
    hy, cy, inp = np.zeros_like(h0), np.zeros_like(c0), x
    for l in range(L):
        ys = []
        for d in range(D):
            wx, wh, bx, bh = mats[l * D + d]
            h, c, y = h0[l * D + d], c0[l * D + d], [None] * T
            for t in (range(T) if d == 0 else reversed(range(T))):
                i, f, g, o = np.split(inp[t] @ wx.T + bx + h @ wh.T + bh, 4, axis=1)
                c = sig(f) * c + sig(i) * np.tanh(g)
                h = y[t] = sig(o) * np.tanh(c)
            hy[l * D + d], cy[l * D + d] = h, c
            ys.append(np.stack(y))
        inp = np.concatenate(ys, axis=2)
    return inp, hy, cy


@needs_gcc
def test_three_bidirectional_layers_against_numpy(rng):
    """Beyond the MXNet cases: 3 layers (two scratch buffers between layers), bidirectional, batch 11 (the
    packed step GEMM). Outputs vs a float64 numpy LSTM; gradients (every input, the packed parameters) vs the
    directional derivative of it (relative 1e-5: float32 sums over 4 steps and 3 layers)."""
    L, D, T, N, I, H = 3, 2, 4, 11, 6, 9
    P = sum(4 * H * D * ((I if l == 0 else D * H) + H + 2) for l in range(L))
    vals = {"data": rng.uniform(-1, 1, (T, N, I)), "params": rng.uniform(-0.5, 0.5, P),
            "state": rng.uniform(-1, 1, (L * D, N, H)), "cell": rng.uniform(-1, 1, (L * D, N, H))}
    vals = {k: v.astype(np.float32) for k, v in vals.items()}
    net = sym.RNN(*[sym.var(k) for k in ("data", "params", "state", "cell")], mode="lstm", state_size=H,
                  num_layers=L, bidirectional=True, state_outputs=True, name="rnn")
    inputs = {k: v for k, v in vals.items() if k != "params"}
    exe = mxcc.compile(net, {k: v.shape for k, v in inputs.items()}, {"params": vals["params"]}, train=True,
                       optimizer=SGD0(), inputs_need_grad=True, poison=True)
    outs = exe.forward(is_train=True, **inputs)
    f64 = {k: v.astype(np.float64) for k, v in vals.items()}
    refs = _np_lstm(f64["data"], f64["params"], f64["state"], f64["cell"], L, D, H)
    for o, r in zip(outs, refs):
        assert rel_err(o, r) <= FORWARD_TOL
    heads = [rng.standard_normal(o.shape).astype(np.float32) for o in outs]
    exe.backward(heads)
    v = {k: rng.standard_normal(a.shape) for k, a in vals.items()}
    loss = lambda s: sum(float((h * o).sum()) for h, o in zip(heads, _np_lstm(  # noqa: E731
        *[f64[k] + s * v[k] for k in ("data", "params", "state", "cell")], L, D, H)))
    fd = (loss(1e-6) - loss(-1e-6)) / 2e-6
    got = sum(float((exe.grad_dict[k].astype(np.float64) * v[k]).sum()) for k in vals)
    assert abs(got - fd) <= 1e-5 * abs(fd)


@needs_gcc
def test_inference_lstm_runs_on_the_pool(rng, tmp_path):
    """An inference LSTM's steps are pool jobs (runtime_c/rnn/rnn_f32.c for_cell_blocks): the network selects
    mxcc's pool; 1, 2 and 5 threads give the same bits, and so does the standalone program with OpenMP regions
    (--no-pool); against a float64 numpy LSTM. N x H large enough for the cells to split (the FLOPs rule)."""
    L, T, N, I, H = 1, 3, 32, 64, 512
    P = 4 * H * (I + H + 2)
    vals = {"data": rng.uniform(-1, 1, (T, N, I)), "params": rng.uniform(-0.1, 0.1, P),
            "state": rng.uniform(-1, 1, (L, N, H)), "cell": rng.uniform(-1, 1, (L, N, H))}
    vals = {k: v.astype(np.float32) for k, v in vals.items()}
    net = sym.RNN(*[sym.var(k) for k in ("data", "params", "state", "cell")], mode="lstm", state_size=H,
                  num_layers=L, name="rnn")
    inputs = {k: v for k, v in vals.items() if k != "params"}
    m = mxcc.compile(net, {k: v.shape for k, v in inputs.items()}, {"params": vals["params"]}, out_dir=tmp_path / "lstm",
                     name="net")
    c = (tmp_path / "lstm" / "net.c").read_text()
    assert "mxcc_rnn_lstm_f32(" in c and "mxcc_pool_select(1)" in c
    outs = {}
    for t in (1, 2, 5):
        m.set_num_threads(t)
        outs[t] = m.forward(**inputs)[0].copy()
    for t in (2, 5):
        np.testing.assert_array_equal(outs[1], outs[t], err_msg=f"{t} threads")
    f64 = {k: v.astype(np.float64) for k, v in vals.items()}
    ref = _np_lstm(f64["data"], f64["params"], f64["state"], f64["cell"], L, 1, H)[0]
    assert rel_err(outs[1], ref) <= FORWARD_TOL
    for k, v in inputs.items():
        np.save(tmp_path / f"{k}.npy", v)
    args = [a for k in inputs for a in ("--input", f"{k}={tmp_path / f'{k}.npy'}")]
    import subprocess
    for engine in ("--pool", "--no-pool"):
        out = tmp_path / f"y{engine}.npy"
        subprocess.run([str(tmp_path / "lstm" / "net_bench"), "--iters", "1", "--warmup", "0", "--threads", "2",
                        engine, "--params", str(tmp_path / "lstm" / "params.params"), *args, "--output", str(out)],
                       check=True, capture_output=True, timeout=120)
        np.testing.assert_array_equal(np.load(out), outs[1], err_msg=engine)
