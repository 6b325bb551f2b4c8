"""First layers (few input channels): mxcc_conv_direct_f32 (direct, vectorized over output pixels) against
mxcc_conv_packed_f32 (what those layers used before: one GEMM with pixels as rows) and ONNX Runtime's Conv.

    python3 benchmarks/conv_direct.py [--threads 1,2] [--rounds 3] [--engines direct,packed,ort] [--json out.jsonl]

direct  mxcc_conv_direct_f32 on the whole batch, weight packed once beforehand (mxcc_conv_direct_pack_f32)
packed  mxcc_conv_packed_f32 on the whole batch, weight packed once beforehand (mxcc_gemm_pack_b_f32)
ort     ONNX Runtime, a model of one Conv node (intra_op_num_threads = threads)
Every engine adds the per-channel bias. Each engine runs in its own worker process; rounds alternate the
engines (benchmarks/conv_packed.py says why, and when OMP_WAIT_POLICY=passive is needed). Build: -O3
-march=native -fopenmp (the flags of generated code), conv_packed.py's build; CP_FLAGS adds compiler flags
(e.g. CP_FLAGS=-DCONV_DIRECT_STAGE_BYTES=16384).
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import harness  # noqa: E402
from conv_packed import _aligned, _build, _ort_session, layer_setup  # noqa: E402


# (name, batch, C, size, kernel, stride, pad, O)
LAYERS = [
    ("mbn conv0 3x3s2 3->32@224", 1, 3, 224, 3, 2, 1, 32),
    ("r18 stem 7x7s2 3->64@224", 1, 3, 224, 7, 2, 3, 64),
    ("sqz1.1 conv0 3x3s2 3->64@224", 1, 3, 224, 3, 2, 0, 64),
    ("lenet conv1 5x5 1->20@28 n64", 64, 1, 28, 5, 1, 0, 20),
]

def worker(spec: dict) -> list[dict]:
    import numpy as np
    engine, threads = spec["engine"], spec["threads"]
    ffi, lib = _build() if engine != "ort" else (None, None)
    par = int(threads > 1)
    rng = np.random.default_rng(0)
    results = []
    for name, batch, c, size, k, s, p, o in LAYERS:
        L = layer_setup(np, ffi, lib, rng, batch, c, size, k, s, p, o, par)
        K, P = L.K, L.P
        if engine == "ort":
            sess = _ort_session(batch, c, size, k, s, p, o, L.w, L.b, threads)
            call = lambda: sess.run(None, {"x": L.x})   # noqa: E731
        else:
            if engine == "packed":
                call = L.packed()
            else:
                wp = _aligned(np, K * -(-o // 8) * 8)
                lib.mxcc_conv_direct_pack_f32(K, o, L.pw, ffi.from_buffer("float[]", wp))
                scratch = _aligned(np, lib.mxcc_conv_direct_scratch_floats(L.g, batch, o, 0))
                pwp, psc = ffi.from_buffer("float[]", wp), ffi.from_buffer("float[]", scratch)
                call = lambda: lib.mxcc_conv_direct_f32(L.g, batch, o, L.px, pwp, L.ep, L.py, psc, par)  # noqa: E731
            call()
            want = np.einsum("ok,nkp->nop", L.w.reshape(o, K).astype(np.float64),
                             _cols(L.x.astype(np.float64), k, s, p, L.out)) + L.b[None, :, None]
            assert np.abs(L.y.reshape(batch, o, P) - want).max() < 1e-3 * np.abs(want).max(), (engine, name)
        samples = harness.time_call(call, min_time=spec["min_time"])
        results.append({"layer": name, "flops": 2 * batch * o * P * K, "samples": samples})
    return results


def _cols(x, k, s, p, out):
    """(N, C*k*k, out*out) im2col of x (N, C, H, W) in float64: the check that each engine computes the layer."""
    import numpy as np
    xp = np.pad(x, [(0, 0), (0, 0), (p, p), (p, p)])
    rows = [xp[:, c, i:i + (out - 1) * s + 1:s, j:j + (out - 1) * s + 1:s].reshape(x.shape[0], -1)
            for c in range(x.shape[1]) for i in range(k) for j in range(k)]
    return np.stack(rows, axis=1)


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--engines", default="direct,packed,ort")
    args = ap.parse_args()
    engines = args.engines.split(",")
    rows, records = [], []
    for threads in map(int, args.threads.split(",")):
        rounds = harness.alternate_engines(__file__, engines, threads, args.rounds, {"min_time": args.min_time})
        r, cols, rec = harness.engine_rows(rounds, engines, threads, "conv_direct", [harness.US(), harness.GFLOPS],
                                           [(f"{e}/direct", e, "direct") for e in engines[1:]])
        rows += r
        records += rec
    harness.print_table(rows, cols)
    harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
