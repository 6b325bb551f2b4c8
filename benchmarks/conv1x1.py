"""Pointwise (1x1 stride-1) convolutions, MobileNet 1.0's shapes at batch 1: mxcc_conv1x1_f32 (the 'pointwise'
path: tiles of output channels x pixels written straight into NCHW) against the paths it replaces and ONNX
Runtime's Conv.

    python3 benchmarks/conv1x1.py [--threads 1,2] [--rounds 3] [--engines pw,packed,gemm,ort] [--only 14,7]
                               [--json out.jsonl]

pw      mxcc_conv1x1_f32, weight packed once beforehand (mxcc_conv1x1_pack_w_f32)
packed  mxcc_conv_packed_f32 (pixels as rows, transposed store), weight packed once beforehand
gemm    mxcc_gemm_f32 per image on the image as B (packs B every call)
ort     ONNX Runtime, a model of one Conv node (intra_op_num_threads = threads)
Every engine adds the per-channel bias. Engines run in their own worker processes, rounds alternate them
(benchmarks/conv_packed.py builds the runtime and the ORT model). The ratios are ORT time / engine time.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
from conv_packed import _aligned, _build, _ort_session  # noqa: E402

# (name, batch, C, size, O): every distinct 1x1 layer of MobileNet 1.0 at 224x224
LAYERS = [("32->64@112", 1, 32, 112, 64), ("64->128@56", 1, 64, 56, 128), ("128->128@56", 1, 128, 56, 128),
          ("128->256@28", 1, 128, 28, 256), ("256->256@28", 1, 256, 28, 256), ("256->512@14", 1, 256, 14, 512),
          ("512->512@14", 1, 512, 14, 512), ("512->1024@7", 1, 512, 7, 1024), ("1024->1024@7", 1, 1024, 7, 1024)]


def worker(spec: dict) -> list[dict]:
    import numpy as np
    engine, threads = spec["engine"], spec["threads"]
    ffi, lib = _build() if engine != "ort" else (None, None)
    ws = lib.mxcc_gemm_ws_create(0) if engine == "gemm" else None
    par = int(threads > 1)
    rng = np.random.default_rng(0)
    results = []
    for name, batch, c, size, o in LAYERS:
        if spec["only"] and not any(f"@{s}" in name for s in spec["only"].split(",")):
            continue
        P = size * size
        x = rng.standard_normal((batch, c, size, size)).astype(np.float32)
        w = (rng.standard_normal((o, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
        b = rng.standard_normal(o).astype(np.float32)
        if engine == "ort":
            sess = _ort_session(batch, c, size, 1, 1, 0, o, w, b, threads)
            call = lambda: sess.run(None, {"x": x})   # noqa: E731
        else:
            y = _aligned(np, batch * o * P)
            ep = ffi.new("mxcc_epilogue *", {"bias": ffi.from_buffer("float[]", b), "per_row": 1})
            px, pw, py = (ffi.from_buffer("float[]", a) for a in (x, w, y))
            if engine == "pw":
                wp = _aligned(np, lib.mxcc_conv1x1_packed_w_floats(c, o))
                lib.mxcc_conv1x1_pack_w_f32(o, c, pw, ffi.from_buffer("float[]", wp))
                scratch = _aligned(np, lib.mxcc_conv1x1_scratch_floats(c, 0))
                pwp, psc = ffi.from_buffer("float[]", wp), ffi.from_buffer("float[]", scratch)
                call = lambda: lib.mxcc_conv1x1_f32(batch, c, P, o, px, pwp, ep, py, psc, par)   # noqa: E731
            elif engine == "packed":
                g = ffi.new("mxcc_conv_geom *", {"channels": c, "in": (1, size, size), "out": (1, size, size),
                                                 "k": (1, 1, 1), "stride": (1, 1, 1), "pad": (0, 0, 0),
                                                 "dilate": (1, 1, 1)})
                wp = _aligned(np, lib.mxcc_gemm_packed_b_floats(c, o))
                lib.mxcc_gemm_pack_b_f32(1, c, o, pw, c, ffi.from_buffer("float[]", wp))
                scratch = _aligned(np, lib.mxcc_conv_packed_scratch_floats(g, batch, o, 0))
                pwp, psc = ffi.from_buffer("float[]", wp), ffi.from_buffer("float[]", scratch)
                call = lambda: lib.mxcc_conv_packed_f32(g, batch, o, px, pwp, ep, py, psc, par)   # noqa: E731
            else:
                def call():
                    for n in range(batch):
                        lib.mxcc_gemm_f32(ws, 0, 0, o, P, c, pw, c, px + n * c * P, P, 0.0, py + n * o * P, P, ep)
        samples = harness.time_call(call, min_time=spec["min_time"])
        results.append({"layer": name, "flops": 2 * batch * o * P * c, "samples": samples})
    return results


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--engines", default="pw,packed,gemm,ort")
    ap.add_argument("--only", default="", help="image sizes to time, e.g. 14,7 (default: all)")
    args = ap.parse_args()
    engines = args.engines.split(",")
    rows, records = [], []
    for threads in map(int, args.threads.split(",")):
        rounds = harness.alternate_engines(__file__, engines, threads, args.rounds,
                                           {"min_time": args.min_time, "only": args.only})
        r, cols, rec = harness.engine_rows(rounds, engines, threads, "conv1x1", [harness.US()],
                                           [(f"ort/{e}", "ort", e) for e in engines if e != "ort"])
        rows += r
        records += rec
    harness.print_table(rows, cols)
    harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
