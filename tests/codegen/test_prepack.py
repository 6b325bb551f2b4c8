"""Weights packed at bind time (codegen/lower.py: LowerCtx.packed_input, kernels/pack_weight.c.j2): which
GEMMs read prepacked panels (inference plans, constant B, past the small-M path), that `<net>_prepare`
repacks when params change, that a training forward never reads stale panels, and end to end against
numpy, also under ASan/UBSan."""
import os
import re
import subprocess

import numpy as np

import mxcc
from mxcc import sym
from mxcc_testing import needs_gcc, rel_err


def _body(src: str, fn: str) -> str:
    """The body of the generated C function `void fn(mxcc_ctx *ctx)`."""
    start = src.index(f"void {fn}(mxcc_ctx *ctx)\n{{")
    return src[start:src.index("\n}\n", start)]


def _net(h1=40, h2=24, out=7):
    """fc1 (weight a param) -> relu -> fc2 (weight folded from a param: transpose(w2) * 0.5) -> dot(., w3)."""
    with sym.NameManager():
        d = sym.var("data")
        h = sym.relu(sym.FullyConnected(d, num_hidden=h1, name="fc1"))
        w2 = sym.transpose(sym.var("w2", shape=(h1, h2)) * 0.5, name="w2t")          # (h2, h1)
        h = sym.FullyConnected(h, weight=w2, num_hidden=h2, no_bias=True, name="fc2")
        return sym.dot(h, sym.var("w3", shape=(h2, out)), name="out")


def _params(rng, shift=0.0, h1=40, h2=24, out=7):
    f = np.float32
    return {"fc1_weight": rng.standard_normal((h1, 33)).astype(f) + shift,
            "fc1_bias": rng.standard_normal(h1).astype(f),
            "w2": rng.standard_normal((h1, h2)).astype(f), "w3": rng.standard_normal((h2, out)).astype(f)}


def _ref(p, x):
    h = np.maximum(x.astype(np.float64) @ p["fc1_weight"].T + p["fc1_bias"], 0)
    return h @ (p["w2"] * 0.5) @ p["w3"]


@needs_gcc
def test_large_batch_reads_packed_weights_and_repacks_on_set_params(rng, tmp_path):
    p1, p2 = _params(rng), _params(rng, shift=2.0)
    x = rng.standard_normal((70, 33)).astype(np.float32)
    mod = mxcc.compile(_net(), {"data": x.shape}, p1, out_dir=tmp_path / "b", name="net")
    src = (tmp_path / "b" / "net.c").read_text()
    # all three GEMMs (a param, a folded value, dot's constant rhs) read panels packed by net_prepare
    assert src.count("mxcc_gemm_f32_packed_b(") == 3
    prepare = _body(src, "net_prepare")
    for fn in ("net_fc1_pack_weight", "net_fc2_pack_weight", "net_out_pack_rhs"):
        assert f"{fn}(ctx)" in prepare and fn not in _body(src, "net_forward")
    assert prepare.index("net_w2t(ctx)") < prepare.index("net_fc2_pack_weight(ctx)")   # folded, then packed
    assert rel_err(mod.forward(data=x)[0], _ref(p1, x)) <= 1e-5
    mod.set_params(p2)
    assert rel_err(mod.forward(data=x)[0], _ref(p2, x)) <= 1e-5
    mod.set_params({"w3": p1["w3"]}, allow_missing=True)
    assert rel_err(mod.forward(data=x)[0], _ref({**p2, "w3": p1["w3"]}, x)) <= 1e-5


@needs_gcc
def test_small_batch_and_unfolded_builds(rng, tmp_path):
    """Batch <= 32 and outputs narrower than 64 columns: FullyConnected's GEMM reads W's rows unpacked (small-M
    path), nothing is packed for it; dot's rhs (not transposed) is still packed. --no-fold: the same results."""
    p = _params(rng)
    x = rng.standard_normal((5, 33)).astype(np.float32)
    mod = mxcc.compile(_net(), {"data": x.shape}, p, out_dir=tmp_path / "s", name="net")
    src = (tmp_path / "s" / "net.c").read_text()
    assert "pack_weight" not in src and src.count("mxcc_gemm_f32_packed_b(") == 1
    assert rel_err(mod.forward(data=x)[0], _ref(p, x)) <= 1e-5
    x = rng.standard_normal((64, 33)).astype(np.float32)
    plain = mxcc.compile(_net(), {"data": x.shape}, p, fold=False)
    assert rel_err(plain.forward(data=x)[0], _ref(p, x)) <= 1e-5


def _wide_net():
    """data (., 50) -> fc1 (96) -> relu -> fc2 (70): outputs wide enough for a few rows to read packed weights."""
    with sym.NameManager():
        return sym.FullyConnected(sym.relu(sym.FullyConnected(sym.var("data"), num_hidden=96, name="fc1")),
                                  num_hidden=70, name="fc2")


@needs_gcc
def test_a_few_rows_read_wide_weights_packed(rng, tmp_path):
    """2 and 4..32 rows against an output of 64 columns or more: the weight is packed at bind time and read as
    panels (the packed micro-kernel; 2 rows and a last panel of 1-2 rows by the one-row kernel's panels); 3 rows
    keep the small-M path."""
    net, f = _wide_net(), np.float32
    p = {"fc1_weight": rng.standard_normal((96, 50)).astype(f), "fc1_bias": rng.standard_normal(96).astype(f),
         "fc2_weight": rng.standard_normal((70, 96)).astype(f), "fc2_bias": rng.standard_normal(70).astype(f)}
    # 2 rows: fc1's 96 columns fill three panels, fc2's 70 do not (panels_filled): one weight packed
    for batch, packed in [(2, 1), (3, 0), (4, 2), (15, 2), (16, 2), (29, 2), (32, 2)]:
        x = rng.standard_normal((batch, 50)).astype(f)
        mod = mxcc.compile(net, {"data": x.shape}, p, out_dir=tmp_path / str(batch), name="net")
        src = (tmp_path / str(batch) / "net.c").read_text()
        assert src.count("mxcc_gemm_f32_packed_b(") == packed and src.count("mxcc_gemm_f32(") == 2 - packed, batch
        h = np.maximum(x.astype(np.float64) @ p["fc1_weight"].T + p["fc1_bias"], 0)
        assert rel_err(mod.forward(data=x)[0], h @ p["fc2_weight"].T + p["fc2_bias"]) <= 1e-5, batch


@needs_gcc
def test_batch_one_reads_packed_weights_by_broadcast(rng, tmp_path):
    """Batch 1: every GEMM with a constant B (FullyConnected's weight, the folded one, dot's rhs) whose columns
    fill the weight panels (64, 32, 96) reads panels packed by net_prepare through mxcc_gemm_f32_small_m_packed_b;
    right after set_params too; under ASan/UBSan. Narrow outputs (40, 24, 7) keep the dot products."""
    wide = dict(h1=64, h2=32, out=96)
    p1, p2 = _params(rng, **wide), _params(rng, shift=1.0, **wide)
    x = rng.standard_normal((1, 33)).astype(np.float32)
    mod = mxcc.compile(_net(**wide), {"data": x.shape}, p1, out_dir=tmp_path / "one", name="net")
    src = (tmp_path / "one" / "net.c").read_text()
    assert src.count("mxcc_gemm_f32_small_m_packed_b(") == 3 and "mxcc_gemm_f32(" not in src
    assert rel_err(mod.forward(data=x)[0], _ref(p1, x)) <= 1e-5
    mod.set_params(p2)
    assert rel_err(mod.forward(data=x)[0], _ref(p2, x)) <= 1e-5
    narrow = mxcc.compile(_net(), {"data": x.shape}, _params(rng), out_dir=tmp_path / "narrow", name="net")
    src = (tmp_path / "narrow" / "net.c").read_text()
    assert "mxcc_gemm_f32_small_m_packed_b(" not in src and src.count("mxcc_gemm_f32(") == 2   # dot's rhs: packed
    out = mxcc.compile(_net(**wide), {"data": (1, 33)}, sanitize=True, out_dir=tmp_path / "san", name="net")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    r = subprocess.run([str(out / "net_bench"), "--iters", "2", "--warmup", "1"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0 and "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, \
        r.stdout + r.stderr


class _SGD:
    kind, state_names = "sgd", ()

    def step_hyper(self, t):
        return {"lr": 0.1, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0}

    def multipliers(self, graph, names):
        return {}, {}


@needs_gcc
def test_training_forward_never_reads_packed_weights(rng, tmp_path):
    """The training forward reads W itself (each update changes it); the inference forward of the same build
    reads panels that net_prepare repacks before every forward(is_train=False)."""
    with sym.NameManager():
        d = sym.var("data")
        net = sym.FullyConnected(sym.Dropout(sym.relu(sym.FullyConnected(d, num_hidden=16, name="fc1")), p=0.5),
                                 num_hidden=4, name="fc2")
    exe = mxcc.compile(net, {"data": (48, 10)}, train=True, optimizer=_SGD(), out_dir=tmp_path / "t", name="net")
    src = (tmp_path / "t" / "net.c").read_text()
    forward, infer = _body(src, "net_forward"), _body(src, "net_forward_infer")
    assert "net_prepare(ctx)" in infer and "net_infer_fc1_pack_weight(ctx)" in _body(src, "net_prepare")
    kernels = re.findall(r"\b(net_\w+)\(ctx\);", forward)
    assert len(kernels) >= 2
    for name in kernels:
        assert "mxcc_gemm_f32_packed_b(" not in _body(src.replace("static MXCC_NOINLINE void", "void"), name)
    exe.set_params({"fc1_weight": rng.standard_normal((16, 10)).astype(np.float32),
                    "fc1_bias": np.zeros(16, np.float32), "fc2_weight": rng.standard_normal((4, 16)).astype(np.float32),
                    "fc2_bias": np.zeros(4, np.float32)})
    x = rng.standard_normal((48, 10)).astype(np.float32)

    def infer_ref():
        a = exe.arg_dict
        return np.maximum(x @ a["fc1_weight"].T + a["fc1_bias"], 0) @ a["fc2_weight"].T + a["fc2_bias"]

    assert rel_err(exe.forward(is_train=False, data=x)[0], infer_ref()) <= 1e-5
    for _ in range(2):
        exe.forward(is_train=True, data=x)
        exe.backward(np.ones((48, 4), np.float32))
        exe.update()
    assert rel_err(exe.forward(is_train=False, data=x)[0], infer_ref()) <= 1e-5


@needs_gcc
def test_prepacked_network_under_sanitizers(tmp_path):
    """The packing in net_prepare (ctx->derived sized by the ISA-independent bound) and the GEMMs reading the
    panels, built with ASan + UBSan: no report."""
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    # a batch of 40; batches of 8 and 16, whose last row panel (AVX2's 6 rows, AVX-512's 14) holds 2 rows
    for net, shape in [(_net(), (40, 33)), (_wide_net(), (8, 50)), (_wide_net(), (16, 50))]:
        out = mxcc.compile(net, {"data": shape}, sanitize=True, out_dir=tmp_path / str(shape), name="net")
        assert "mxcc_gemm_f32_packed_b(" in (out / "net.c").read_text()
        r = subprocess.run([str(out / "net_bench"), "--iters", "2", "--warmup", "1"], capture_output=True,
                           text=True, env=env, timeout=300)
        assert r.returncode == 0 and "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, \
            r.stdout + r.stderr
