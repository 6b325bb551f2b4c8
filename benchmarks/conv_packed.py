"""Dense convolutions: mxcc_conv_packed_f32 (one GEMM, pixels as rows, prepacked weights) against the current
im2col path and ONNX Runtime's Conv, on ResNet-18's, MobileNet's pointwise and LeNet's conv shapes.

    python3 benchmarks/conv_packed.py [--threads 1,2] [--rounds 3] [--engines packed,im2col,ort] [--json out.jsonl]

packed  mxcc_conv_packed_f32 on the whole batch, weight packed once beforehand (mxcc_gemm_pack_b_f32)
im2col  what templates/kernels/conv2d.c.j2 emits today: per image, blocks of mxcc/ops/convolution.py's
        col_block() output pixels, mxcc_im2col_block_f32 then mxcc_gemm_f32 (C = W . col); 1x1 stride-1
        layers are one mxcc_gemm_f32 on the image (the lowering's 'gemm' path)
ort     ONNX Runtime, a model of one Conv node (intra_op_num_threads = threads)
Every engine adds the per-channel bias. Each engine runs in its own worker process (OpenMP's spinning
threads and ORT's pool never compete); rounds alternate the engines. GFLOP/s counts 2*K per output.
Build: -O3 -march=native -fopenmp (the flags of generated code); CP_FLAGS adds compiler flags (e.g.
CP_FLAGS=-DCONV_PACKED_KC=256 to time the K-sliced loop).
On a loaded 2-core machine (another busy process), libgomp's default spin-then-sleep wait makes every
2-thread call of both OpenMP engines take whole scheduler ticks (8 ms measured for a 80 us layer, the same
for mxcc_gemm_f32 in a C driver; ORT's pool is not affected): run with OMP_WAIT_POLICY=passive there, and
say so next to the numbers.
"""
from __future__ import annotations

import hashlib
import os
import importlib.util
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import harness  # noqa: E402

RUNTIME = HERE.parent / "runtime_c"

# (name, batch, C, size, kernel, stride, pad, O)
LAYERS = [
    ("r18 stem 7x7s2 3->64@224", 1, 3, 224, 7, 2, 3, 64),
    ("r18 3x3 64@56", 1, 64, 56, 3, 1, 1, 64),
    ("r18 3x3s2 64->128@56", 1, 64, 56, 3, 2, 1, 128),
    ("r18 1x1s2 64->128@56", 1, 64, 56, 1, 2, 0, 128),
    ("r18 3x3 128@28", 1, 128, 28, 3, 1, 1, 128),
    ("r18 3x3s2 128->256@28", 1, 128, 28, 3, 2, 1, 256),
    ("r18 1x1s2 128->256@28", 1, 128, 28, 1, 2, 0, 256),
    ("r18 3x3 256@14", 1, 256, 14, 3, 1, 1, 256),
    ("r18 3x3s2 256->512@14", 1, 256, 14, 3, 2, 1, 512),
    ("r18 1x1s2 256->512@14", 1, 256, 14, 1, 2, 0, 512),
    ("r18 3x3 512@7", 1, 512, 7, 3, 1, 1, 512),
    ("mbn 1x1 32->64@112", 1, 32, 112, 1, 1, 0, 64),
    ("mbn 1x1 512->512@14", 1, 512, 14, 1, 1, 0, 512),
    ("mbn 1x1 512->1024@7", 1, 512, 7, 1, 1, 0, 1024),
    ("mbn 1x1 1024->1024@7", 1, 1024, 7, 1, 1, 0, 1024),
    ("lenet conv2 5x5 20->50@12 n64", 64, 20, 12, 5, 1, 0, 50),
]

_CDEF_EXTRA = """
typedef struct mxcc_gemm_ws mxcc_gemm_ws;
mxcc_gemm_ws *mxcc_gemm_ws_create(int max_threads);
void mxcc_gemm_f32(mxcc_gemm_ws *ws, int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc, const mxcc_epilogue *ep);
void mxcc_gemm_pack_b_f32(int trans_b, int K, int N, const float *B, int ldb, float *Bp);
long mxcc_gemm_packed_b_floats(int K, int N);
void mxcc_im2col_block_f32(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int parallel);
long mxcc_conv_packed_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads);
void mxcc_conv_packed_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *wp,
                          const mxcc_epilogue *ep, float *y, float *scratch, int parallel);
long mxcc_conv1x1_packed_w_floats(int C, int O);
void mxcc_conv1x1_pack_w_f32(int O, int C, const float *w, float *wp);
long mxcc_conv1x1_scratch_floats(int C, int max_threads);
void mxcc_conv1x1_f32(int batch, int C, int P, int O, const float *x, const float *wp, const mxcc_epilogue *ep,
                      float *y, float *scratch, int parallel);
void mxcc_conv_direct_pack_f32(int K, int O, const float *w, float *wp);
long mxcc_conv_direct_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads);
void mxcc_conv_direct_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *wp,
                          const mxcc_epilogue *ep, float *y, float *scratch, int parallel);
"""


def _build(isa: str = "native"):
    """runtime_c/conv + runtime_c/gemm as a cffi module (cached by source hash in the temp dir); also the
    build of benchmarks/conv1x1.py and benchmarks/conv_direct.py."""
    import cffi
    gemm_h = (RUNTIME / "gemm" / "mxcc_gemm.h").read_text()
    conv_h = (RUNTIME / "conv" / "mxcc_conv.h").read_text()
    types = re.findall(r"typedef (?:enum|struct) \w+ \{.*?\} \w+;", gemm_h, re.S)
    geom = re.search(r"typedef struct mxcc_conv_geom \{.*?\} mxcc_conv_geom;", conv_h, re.S).group(0)
    sources = [*sorted((RUNTIME / "conv").glob("*.c")), *sorted((RUNTIME / "gemm").glob("*.c")),
               RUNTIME / "pool" / "pool.c"]   # the kernels' parallel work runs through mxcc_parallel_chunks
    digest = hashlib.sha256((isa + os.environ.get("CP_FLAGS", "")).encode())
    for p in [*sources, *sorted(RUNTIME.glob("*/*.h")), *sorted(RUNTIME.glob("*.h"))]:
        digest.update(p.read_bytes())
    name = f"_mxcc_conv_packed_bench_{isa.replace('-', '_')}_{digest.hexdigest()[:12]}"
    ffi = cffi.FFI()
    ffi.cdef("\n".join(types) + "\n" + geom + _CDEF_EXTRA)
    ffi.set_source(name, '#include "conv/mxcc_conv.h"\n', sources=[str(s) for s in sources],
                   include_dirs=[str(RUNTIME)], libraries=["m"], extra_link_args=["-fopenmp"],
                   extra_compile_args=["-O3", f"-march={isa}", "-fopenmp", "-std=gnu11", *os.environ.get("CP_FLAGS", "").split()])
    so = ffi.compile(tmpdir=str(Path(tempfile.gettempdir()) / "mxcc_conv_packed_bench"))
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


def _aligned(np, n):
    """n float32 zeros starting on a 64-byte boundary."""
    raw = np.zeros(n + 16, np.float32)
    off = (-raw.ctypes.data % 64) // 4
    return raw[off:off + n]


def _ort_session(batch, c, size, k, s, p, o, w, b, threads):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    out = (size + 2 * p - k) // s + 1
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, o, out, out])],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def layer_setup(np, ffi, lib, rng, batch, c, size, k, s, p, o, par):
    """One square layer of LAYERS: random x, w (scaled by 1/sqrt(K)) and bias, and, given a build (ffi), its
    geometry, a 64-byte aligned output y, the bias epilogue, and `packed`: mxcc_conv_packed_f32 on the whole
    batch with the weight packed beforehand. Shared with benchmarks/conv_direct.py."""
    from types import SimpleNamespace
    out = (size + 2 * p - k) // s + 1
    L = SimpleNamespace(out=out, K=c * k * k, P=out * out)
    L.x = rng.standard_normal((batch, c, size, size)).astype(np.float32)
    L.w = (rng.standard_normal((o, c, k, k)) / np.sqrt(L.K)).astype(np.float32)
    L.b = rng.standard_normal(o).astype(np.float32)
    if ffi is None:
        return L
    L.g = ffi.new("mxcc_conv_geom *", {"channels": c, "in": (1, size, size), "out": (1, out, out), "k": (1, k, k),
                                       "stride": (1, s, s), "pad": (0, p, p), "dilate": (1, 1, 1)})
    L.y = _aligned(np, batch * o * L.P)
    L.ep = ffi.new("mxcc_epilogue *", {"bias": ffi.from_buffer("float[]", L.b), "per_row": 1})
    L.px, L.pw, L.py = (ffi.from_buffer("float[]", a) for a in (L.x, L.w, L.y))

    def packed():
        wp = _aligned(np, lib.mxcc_gemm_packed_b_floats(L.K, o))
        lib.mxcc_gemm_pack_b_f32(1, L.K, o, L.pw, L.K, ffi.from_buffer("float[]", wp))
        scratch = _aligned(np, lib.mxcc_conv_packed_scratch_floats(L.g, batch, o, 0))
        pwp, psc = ffi.from_buffer("float[]", wp), ffi.from_buffer("float[]", scratch)
        return lambda: lib.mxcc_conv_packed_f32(L.g, batch, o, L.px, pwp, L.ep, L.py, psc, par)
    L.packed = packed
    return L


def worker(spec: dict) -> list[dict]:
    import numpy as np
    sys.path.insert(0, str(HERE.parent))
    from mxcc.ops.convolution import col_block
    engine, threads = spec["engine"], spec["threads"]
    ffi, lib = _build() if engine != "ort" else (None, None)
    ws = lib.mxcc_gemm_ws_create(0) if engine == "im2col" else None
    par = int(threads > 1)
    rng = np.random.default_rng(0)
    results = []
    for name, batch, c, size, k, s, p, o in LAYERS:
        L = layer_setup(np, ffi, lib, rng, batch, c, size, k, s, p, o, par)
        K, P, x = L.K, L.P, L.x
        if engine == "ort":
            sess = _ort_session(batch, c, size, k, s, p, o, L.w, L.b, threads)
            call = lambda: sess.run(None, {"x": x})   # noqa: E731
        else:
            g, ep, px, pw, py = L.g, L.ep, L.px, L.pw, L.py
            if engine == "packed":
                call = L.packed()
            elif k == 1 and s == 1 and p == 0:
                def call():
                    for n in range(batch):
                        lib.mxcc_gemm_f32(ws, 0, 0, o, P, K, pw, K, px + n * c * size * size, P, 0.0,
                                          py + n * o * P, P, ep)
            else:
                nb = col_block(K, P)
                col = _aligned(np, K * nb)
                pcol = ffi.from_buffer("float[]", col)
                eps = [ffi.new("mxcc_epilogue *", {"bias": ep.bias, "per_row": 1}) for _ in range(0, P, nb)]

                def call():
                    for n in range(batch):
                        xn, yn = px + n * c * size * size, py + n * o * P
                        for i, j0 in enumerate(range(0, P, nb)):
                            nj = min(nb, P - j0)
                            lib.mxcc_im2col_block_f32(g, xn, j0, nj, pcol, par)
                            lib.mxcc_gemm_f32(ws, 0, 0, o, nj, K, pw, K, pcol, nj, 0.0, yn + j0, P, eps[i])
        samples = harness.time_call(call, min_time=spec["min_time"])
        results.append({"layer": name, "flops": 2 * batch * o * P * K, "samples": samples})
    return results


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--engines", default="packed,im2col,ort")
    args = ap.parse_args()
    engines = args.engines.split(",")
    rows, records = [], []
    for threads in map(int, args.threads.split(",")):
        rounds = harness.alternate_engines(__file__, engines, threads, args.rounds, {"min_time": args.min_time})
        r, cols, rec = harness.engine_rows(rounds, engines, threads, "conv_packed", [harness.GFLOPS],
                                           [(f"packed/{e}", e, "packed") for e in engines[1:]])
        rows += r
        records += rec
    harness.print_table(rows, cols)
    harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
