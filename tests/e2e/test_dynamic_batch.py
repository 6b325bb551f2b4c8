"""Dynamic batch: one module compiled for a maximum batch runs every batch 1..max (compile(dynamic_batch=True)).

Truth: modules compiled for each batch (mxcc's fixed-shape path, itself tested against MXNet), MXNet's golden
outputs (inference is per sample: the first rows of a batch are the outputs of those rows alone), and MXNet's
training of the MLP with a partial last batch (tests/data/train/mlp_partial, made by its gen_partial.py).
"""
import subprocess

import numpy as np
import pytest

import mxcc
from mxcc.codegen.batchvar import BatchDecision, Extent, c_text
from mxcc.errors import ShapeError
from mxcc.params import load_params, split_arg_aux
from mxcc.train.optimizer import SGD
from mxcc_testing import DATA, needs_gcc, rel_err

MODELS = DATA / "models"
# name -> input, shape at the maximum
NETS = {"lenet": ("data", (64, 1, 28, 28)), "mlp": ("X", (256, 784)), "resnet18_v1_slim": ("data", (8, 3, 224, 224))}


def _batches(maximum: int) -> list[int]:
    return sorted({1, 2, 3, 4, maximum // 2 + 1, maximum - 1, maximum})   # 4: packed rows from 4 (FullyConnected)


def _net(name):
    d = MODELS / name
    return d / f"{name}-symbol.json", d / f"{name}-0000.params"


# -- the symbolic extent ----------------------------------------------------------------------------------------
def test_extent_arithmetic_and_its_c():
    n = Extent(1, 0, 64)
    m = 784 * n
    assert (m.a, m.b) == (784, 0) and (m // 784).a == 1 and m // n == 784
    assert c_text(f"{m}L {n}L {m + 3}.0 {2 * n}.0f") == "(784 * N) N (double)(784 * N + 3) (float)(2 * N)"
    cond = m >= 1 << 15
    assert c_text(str(cond)) == "((784 * N) >= 32768)"
    assert [cond.at(k) for k in (1, 41, 42, 64)] == [False, False, True, True] and cond.at_max
    assert (128 * n >= 1 << 15) is False and (n >= 1) is True    # the same for every batch 1..64: decided now
    with pytest.raises(BatchDecision):      # a Python decision on the batch must be made explicitly
        bool(cond)
    with pytest.raises(BatchDecision):
        range(n)
    with pytest.raises(BatchDecision):      # the batch in two factors is not an extent
        n * n
    with pytest.raises(BatchDecision):
        (3 * n) // 2


# -- inference --------------------------------------------------------------------------------------------------
@needs_gcc
@pytest.mark.parametrize("name", sorted(NETS))
def test_every_batch_matches_a_module_compiled_for_it(name):
    symbol, params = _net(name)
    inp, shape = NETS[name]
    dyn = mxcc.compile(symbol, {inp: shape}, params, dynamic_batch=True)
    assert dyn.max_batch == shape[0]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    for n in _batches(shape[0]):
        fixed = mxcc.compile(symbol, {inp: (n, *shape[1:])}, params)
        ref = fixed.forward(**{inp: x[:n]})[0]
        got = dyn.forward(**{inp: x[:n]})[0]
        assert got.shape == ref.shape == (n, *ref.shape[1:])
        assert rel_err(got, ref) <= 1e-5, n
    # batches in any order: nothing of a larger call leaks into a smaller one
    for n in (shape[0], 1, 3, shape[0] - 1, 2):
        fixed = dyn.forward(**{inp: x[:n]})[0]
        assert rel_err(fixed, mxcc.compile(symbol, {inp: (n, *shape[1:])}, params).forward(**{inp: x[:n]})[0]) \
            <= 1e-5


@needs_gcc
@pytest.mark.parametrize("name", ["lenet", "resnet18_v1_slim"])
def test_mxnet_golden_outputs_at_every_batch(name):
    symbol, params = _net(name)
    io = np.load(MODELS / name / f"{name}-io.npz")
    x, ref = io["input"], io["output"]
    dyn = mxcc.compile(symbol, {"data": x.shape}, params, dynamic_batch=True)
    for n in range(1, x.shape[0] + 1):
        assert rel_err(dyn.forward(data=x[:n])[0], ref[:n]) <= 2e-5, n


@needs_gcc
def test_batch_errors_name_the_input_and_the_maximum():
    symbol, params = _net("lenet")
    dyn = mxcc.compile(symbol, {"data": (8, 1, 28, 28)}, params, dynamic_batch=True)
    x = np.zeros((9, 1, 28, 28), np.float32)
    with pytest.raises(ShapeError, match=r"'data' has batch 9, outside 1\.\.8"):
        dyn.forward(data=x)
    with pytest.raises(ShapeError, match="'softmax_label' has batch 4 but 'data' has 3"):
        dyn.forward(data=x[:3], softmax_label=np.zeros(4, np.float32))
    with pytest.raises(ShapeError, match=r"expected \(N, 1, 28, 28\)"):
        dyn.forward(data=np.zeros((3, 28, 28), np.float32))
    with pytest.raises(ShapeError, match=r"\(3, 1, 28, 28\)"):          # the other dimensions stay fixed
        dyn.forward(data=np.zeros((3, 1, 28, 27), np.float32))
    assert dyn.forward(data=x[:3], softmax_label=np.zeros(3, np.float32))[0].shape == (3, 10)


@needs_gcc
def test_a_network_that_mixes_the_batch_is_refused_naming_the_node():
    x = mxcc.sym.Variable("data")
    y = mxcc.sym.Reshape(mxcc.sym.FullyConnected(x, num_hidden=4, name="fc"), shape=(2, 32), name="fixed")
    with pytest.raises(ShapeError, match="fixed"):
        mxcc.compile(y, {"data": (16, 8)}, dynamic_batch=True)


@needs_gcc
def test_marked_batch_dimension_and_a_time_major_axis():
    """'?MAX' marks the batch; here the batch is axis 1 of a (T, N, C) input, SwapAxis'd to batch-major."""
    x = mxcc.sym.Variable("data")
    y = mxcc.sym.FullyConnected(mxcc.sym.SwapAxis(x, dim1=0, dim2=1), num_hidden=5, flatten=True, name="fc")
    rng = np.random.default_rng(0)
    params = {"fc_weight": rng.standard_normal((5, 12)).astype(np.float32), "fc_bias": np.ones(5, np.float32)}
    dyn = mxcc.compile(y, {"data": (3, "?6", 4)}, params)
    assert dyn.max_batch == 6
    data = rng.standard_normal((3, 6, 4)).astype(np.float32)
    for n in (1, 4, 6):
        got = dyn.forward(data=np.ascontiguousarray(data[:, :n]))[0]
        ref = data[:, :n].transpose(1, 0, 2).reshape(n, 12) @ params["fc_weight"].T + 1
        assert got.shape == (n, 5) and rel_err(got, ref) <= 1e-6


@needs_gcc
def test_rows_a_multiple_of_the_batch_choose_their_gemm_path_per_call(tmp_path):
    """FullyConnected(flatten=False) on (N, 3, 50): 3N rows. Against a weight packed at bind time, 3 rows (N = 1)
    take the small-M path on the weight as it is, 6 and more the packed panels: a run-time test in the module
    (kernels/gemm.c.j2), each batch against numpy."""
    x = mxcc.sym.Variable("data")
    y = mxcc.sym.FullyConnected(x, num_hidden=70, flatten=False, name="fc")
    rng = np.random.default_rng(1)
    params = {"fc_weight": rng.standard_normal((70, 50)).astype(np.float32),
              "fc_bias": rng.standard_normal(70).astype(np.float32)}
    dyn = mxcc.compile(y, {"data": (8, 3, 50)}, params, dynamic_batch=True, out_dir=tmp_path / "d", name="net")
    src = (tmp_path / "d" / "net.c").read_text()
    assert "mxcc_gemm_f32(" in src and "mxcc_gemm_f32_packed_b(" in src
    data = rng.standard_normal((8, 3, 50)).astype(np.float32)
    for n in (1, 2, 5, 8):
        got = dyn.forward(data=data[:n])[0]
        ref = data[:n].astype(np.float64) @ params["fc_weight"].T + params["fc_bias"]
        assert got.shape == (n, 3, 70) and rel_err(got, ref) <= 1e-6, n


@needs_gcc
def test_poison_build_reads_no_row_past_the_batch():
    """A poison build fills the arena and every output with NaN before each call: a kernel reading rows of the
    maximum beyond the call's batch would bring NaN into the rows it writes."""
    for name in ("lenet", "mlp"):
        symbol, params = _net(name)
        inp, shape = NETS[name]
        dyn = mxcc.compile(symbol, {inp: shape}, params, dynamic_batch=True, poison=True)
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        for n in (shape[0], 1, 3, shape[0] // 2 + 1):
            got = dyn.forward(**{inp: x[:n]})[0]
            ref = mxcc.compile(symbol, {inp: (n, *shape[1:])}, params).forward(**{inp: x[:n]})[0]
            assert np.isfinite(got).all() and rel_err(got, ref) <= 1e-5, (name, n)


@needs_gcc
def test_bench_runs_a_batch_and_writes_its_output(tmp_path):
    symbol, params = _net("mlp")
    out = tmp_path / "mlp"
    mxcc.compile(symbol, {"X": (32, 784)}, params, dynamic_batch=True, out_dir=out, name="mlp")
    x = np.random.default_rng(2).standard_normal((5, 784)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([str(out / "mlp_bench"), "--batch", "5", "--iters", "3", "--params", str(params),
                        "--input", f"X={tmp_path / 'x.npy'}", "--output", str(tmp_path / "y.npy")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "batch 5 of at most 32" in r.stdout
    ref = mxcc.compile(symbol, {"X": (5, 784)}, params).forward(X=x)[0]
    assert rel_err(np.load(tmp_path / "y.npy"), ref) <= 1e-5
    r = subprocess.run([str(out / "mlp_bench"), "--batch", "33"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "expected 1..32" in r.stderr


# -- training ---------------------------------------------------------------------------------------------------
@needs_gcc
def test_partial_last_batch_trains_as_mxnet():
    """MXNet: batches of 100, 100, then 50 on an executor reshaped for it, rescale_grad 1/100 throughout."""
    d = DATA / "train" / "mlp"
    arg, _ = split_arg_aux(load_params(d / "mlp-init-0000.params"))
    ref = np.load(DATA / "train" / "mlp_partial" / "mlp-partial.npz")
    trace = np.load(d / "mlp-trace.npz")
    x, y = trace["data"][:250], trace["label"][:250]
    ex = mxcc.compile(d / "mlp-symbol.json", {"X": (100, 784), "label": (100,)}, train=True, dynamic_batch=True,
                      optimizer=SGD(learning_rate=0.1, wd=1e-4, rescale_grad=1.0 / 100))
    ex.set_params(arg)
    for first, n in ((0, 100), (100, 100), (200, 50)):
        out = ex.forward(is_train=True, X=x[first:first + n], label=y[first:first + n])[0]
        ex.backward()
        if n == 50:
            assert out.shape == (50, 10) and rel_err(out, ref["step2_out"]) <= 1e-5
            for p in ("b0", "w1", "b1", "w2", "b2"):
                assert rel_err(ex.grad_dict[p], ref[f"step2_grad:{p}"]) <= 1e-5, p
        ex.update()
    for p, w in ex.arg_dict.items():
        if p not in ("X", "label"):
            assert rel_err(w, ref[f"weight:{p}"]) <= 1e-5, p


# -- the profiler ---------------------------------------------------------------------------------------------
@needs_gcc
def test_profiler_trace_gives_each_call_its_batch(tmp_path):
    import json
    from mxcc import profiler
    symbol, params = _net("mlp")
    dyn = mxcc.compile(symbol, {"X": (64, 784)}, params, dynamic_batch=True)
    x = np.zeros((64, 784), np.float32)
    profiler._reset()
    try:
        profiler.set_config(filename=tmp_path / "p.json", continuous_dump=False, aggregate_stats=True)
        profiler.set_state("run")
        for n in (3, 64, 1):
            dyn.forward(X=x[:n])
        profiler.set_state("stop")
        profiler.dump()
    finally:
        profiler._reset()
    events = json.loads((tmp_path / "p.json").read_text())["traceEvents"]
    passes = [e for e in events if e.get("cat") == "pass"]
    assert [p["args"]["batch"] for p in passes] == [3, 64, 1]
    fc0 = [e for e in events if e.get("ph") == "X" and e.get("cat") == "FullyConnected+Activation"
           and e["args"].get("function") == "mlp_fullyconnected0"]
    per_row = 2 * 784 * 128 + 2 * 128           # per sample: multiply-adds, bias, ReLU
    assert [e["args"]["batch"] for e in fc0] == [3, 64, 1]
    assert [e["args"]["flops"] for e in fc0] == [per_row * n for n in (3, 64, 1)]


@needs_gcc
def test_train_program_runs_the_last_short_batch(tmp_path):
    """<net>_train of a dynamic-batch build: 250 training images in batches of 100 are three steps (100, 100, 50),
    and 50 validation images one forward of 50; its --timeline events carry each call's batch."""
    from mxcc_testing import ROOT
    mnist = ROOT / "examples" / "data" / "mnist"
    d = DATA / "train" / "mlp"
    out = tmp_path / "mlp"
    mxcc.compile(d / "mlp-symbol.json", {"X": (100, 784), "label": (100,)}, train=True, dynamic_batch=True,
                 optimizer=SGD(learning_rate=0.1, rescale_grad=1.0 / 100), out_dir=out, name="mlp")
    r = subprocess.run([str(out / "mlp_train"), "--images", str(mnist / "t10k-images-idx3-ubyte.gz"), "--labels",
                        str(mnist / "t10k-labels-idx1-ubyte.gz"), "--epochs", "1", "--train", "250", "--val", "50",
                        "--timeline", str(tmp_path / "tl.bin")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Epoch: 0 ")
    ev = np.fromfile(tmp_path / "tl.bin", dtype=mxcc.Module.PROF_DTYPE)
    updates = ev[ev["phase"] == 2]                  # one event per parameter per step
    assert list(updates["batch"][::6]) == [100, 100, 50]
    assert ev["batch"][-1] == 50                    # the validation forward


@needs_gcc
def test_a_refused_training_call_changes_nothing():
    """A call refused for its shapes leaves the executor at its last batch and bindings (checked before any
    change): the inputs bound and the batch are those of the last call that ran."""
    d = DATA / "train" / "mlp"
    arg, _ = split_arg_aux(load_params(d / "mlp-init-0000.params"))
    x = np.random.default_rng(5).standard_normal((8, 784)).astype(np.float32)
    y = np.arange(8, dtype=np.float32) % 10
    ex = mxcc.compile(d / "mlp-symbol.json", {"X": (8, 784), "label": (8,)}, train=True, dynamic_batch=True,
                      optimizer=SGD(learning_rate=0.1, rescale_grad=1.0 / 8))
    ex.set_params(arg)
    x3 = x[:3].copy()
    ex.forward(is_train=True, X=x3, label=y[:3])
    with pytest.raises(ShapeError, match="'label' has batch 7 but 'X' has 8"):
        ex.forward(is_train=True, X=x, label=y[:7])
    with pytest.raises(ShapeError, match=r"expected \(N,\)"):
        ex.forward(is_train=True, X=x, label=np.zeros((8, 2), np.float32))
    with pytest.raises(ShapeError, match=r"expected \(8, 784\)"):
        ex.forward(is_train=True, X=np.zeros((8, 785), np.float32), label=y)
    assert ex.batch == 3 and ex.outputs[0].shape == (3, 10) and ex.arg_dict["X"] is x3
    assert ex.grad_dict["w0"].shape == (128, 784)


@needs_gcc
def test_inference_forward_of_a_training_build_takes_the_batch():
    """A network whose modes differ (Dropout) trained with a dynamic batch: forward(is_train=False) and the
    backward after it run the call's batch, as an executor compiled for that batch does."""
    sym = mxcc.sym
    h = sym.Dropout(sym.relu(sym.FullyConnected(sym.var("X"), num_hidden=64, name="fc1")), p=0.5)
    net = sym.SoftmaxOutput(sym.FullyConnected(h, num_hidden=10, name="fc2"), sym.var("label"), name="softmax")
    rng = np.random.default_rng(4)
    params = {"fc1_weight": rng.standard_normal((64, 784)).astype(np.float32) / 28, "fc1_bias": np.zeros(64, np.float32),
              "fc2_weight": rng.standard_normal((10, 64)).astype(np.float32) / 8, "fc2_bias": np.zeros(10, np.float32)}
    x = rng.standard_normal((16, 784)).astype(np.float32)
    y = (np.arange(16) % 10).astype(np.float32)
    dyn = mxcc.compile(net, {"X": (16, 784), "label": (16,)}, train=True, dynamic_batch=True)
    dyn.set_params(params)
    for n in (3, 16, 1):
        fixed = mxcc.compile(net, {"X": (n, 784), "label": (n,)}, train=True)
        fixed.set_params(params)
        got = dyn.forward(is_train=False, X=x[:n], label=y[:n])[0].copy()
        dyn.backward()
        ref = fixed.forward(is_train=False, X=x[:n], label=y[:n])[0]
        fixed.backward()
        assert got.shape == (n, 10) and rel_err(got, ref) <= 1e-5, n
        assert rel_err(dyn.grad_dict["fc1_weight"], fixed.grad_dict["fc1_weight"]) <= 1e-5, n
