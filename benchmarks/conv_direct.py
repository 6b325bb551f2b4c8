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
from conv_packed import _aligned, _build, _ort_session  # noqa: E402


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
        out = (size + 2 * p - k) // s + 1
        K, P = c * k * k, out * out
        x = rng.standard_normal((batch, c, size, size)).astype(np.float32)
        w = (rng.standard_normal((o, c, k, k)) / np.sqrt(K)).astype(np.float32)
        b = rng.standard_normal(o).astype(np.float32)
        if engine == "ort":
            sess = _ort_session(batch, c, size, k, s, p, o, w, b, threads)
            call = lambda: sess.run(None, {"x": x})   # noqa: E731
        else:
            g = ffi.new("mxcc_conv_geom *", {"channels": c, "in": (1, size, size), "out": (1, out, out),
                                             "k": (1, k, k), "stride": (1, s, s), "pad": (0, p, p),
                                             "dilate": (1, 1, 1)})
            y = _aligned(np, batch * o * P)
            ep = ffi.new("mxcc_epilogue *", {"bias": ffi.from_buffer("float[]", b), "per_row": 1})
            px, pw, py = (ffi.from_buffer("float[]", a) for a in (x, w, y))
            if engine == "packed":
                wp = _aligned(np, lib.mxcc_gemm_packed_b_floats(K, o))
                lib.mxcc_gemm_pack_b_f32(1, K, o, pw, K, ffi.from_buffer("float[]", wp))
                scratch = _aligned(np, lib.mxcc_conv_packed_scratch_floats(g, batch, o, 0))
                fn = lib.mxcc_conv_packed_f32
            else:
                wp = _aligned(np, K * -(-o // 8) * 8)
                lib.mxcc_conv_direct_pack_f32(K, o, pw, ffi.from_buffer("float[]", wp))
                scratch = _aligned(np, lib.mxcc_conv_direct_scratch_floats(g, batch, o, 0))
                fn = lib.mxcc_conv_direct_f32
            pwp, psc = ffi.from_buffer("float[]", wp), ffi.from_buffer("float[]", scratch)
            call = lambda: fn(g, batch, o, px, pwp, ep, py, psc, par)   # noqa: E731
            call()
            want = np.einsum("ok,nkp->nop", w.reshape(o, K).astype(np.float64),
                             _cols(x.astype(np.float64), k, s, p, out)) + b[None, :, None]
            assert np.abs(y.reshape(batch, o, P) - want).max() < 1e-3 * np.abs(want).max(), (engine, name)
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
        for (layer, flops), by_engine in rounds.items():
            row = {"threads": threads, "layer": layer}
            med = {}
            for engine in engines:
                st = harness.summarize_rounds(by_engine[engine])
                med[engine] = st["median_s"]
                row[f"{engine} us"] = f"{st['median_s'] * 1e6:.0f}"
                row[f"{engine} GF/s"] = f"{flops / st['median_s'] * 1e-9:.1f}"
                records.append({"bench": "conv_direct", "threads": threads, "layer": layer, "engine": engine, **st})
            for other in engines[1:]:
                if "direct" in med:
                    row[f"{other}/direct"] = f"{med[other] / med['direct']:.2f}"
            rows.append(row)
    cols = [("threads", "threads"), ("layer", "layer")]
    cols += [(f"{e} {u}", f"{e} {u}") for e in engines for u in ("us", "GF/s")]
    cols += [(f"{e}/direct", f"{e}/direct") for e in engines[1:] if "direct" in engines]
    harness.print_table(rows, cols)
    harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
