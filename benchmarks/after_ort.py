"""mxcc right after ONNX Runtime in the same process: how long ORT's spinning workers slow mxcc's calls.

    python benchmarks/after_ort.py [--threads 2] [--batch 64] [--repeats 6]

ORT's workers spin on for a while after each run. mxcc's pool sees the lost time and dozes (runtime_c/pool/pool.c);
a doze outlasting the load costs the calls after it. This runs the MLP (tests/data/models/mlp) 200 times on ORT,
then mxcc's forward for 1.4 s, and prints the per-call medians of mxcc in 0.25 s windows after the ORT runs
(repeated, a 1.2 s pause between repeats), beside a mxcc-only baseline and the pool's count of dozes (`caps`).
For an A/B of two versions, run it from each checkout (`python -m` or a script puts the checkout's package
first). Needs `pip install onnx onnxruntime` (benchmark-only).
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

MLP = HERE.parent / "tests" / "data" / "models" / "mlp"
WINDOWS = (0.0, 0.25, 0.5, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=6)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import onnxruntime as ort
    import mxcc
    from mxcc.params import load_params, split_arg_aux
    from _onnx import ort_session, to_onnx, typed_graph

    shape = {"X": (args.batch, 784)}
    params, _ = split_arg_aux(load_params(MLP / "mlp-0000.params"))
    m = mxcc.compile(MLP / "mlp-symbol.json", shape, params, threads=args.threads)
    sess = ort_session(to_onnx(typed_graph(MLP / "mlp-symbol.json", shape), params), args.threads)
    x = np.random.default_rng(0).standard_normal(shape["X"]).astype(np.float32)
    lib = ctypes.CDLL(glob.glob(str(m.dir) + "/_mxcc_*.so")[0])
    lib.mxcc_pool_caps.restype = ctypes.c_long

    def calls(seconds: float) -> list[tuple[float, float]]:
        t0, out = time.perf_counter(), []
        while time.perf_counter() - t0 < seconds:
            a = time.perf_counter()
            m.forward(X=x)
            out.append((a - t0, time.perf_counter() - a))
        return out

    calls(0.3)
    time.sleep(0.5)
    alone = float(np.median([d for _, d in calls(1.0)])) * 1e6
    wins: dict[float, list[float]] = {w: [] for w in WINDOWS}
    for _ in range(args.repeats):
        for _ in range(200):
            sess.run(None, {"X": x})
        ts = calls(WINDOWS[-1] + 0.4)
        for w in WINDOWS:
            wins[w].append(float(np.median([d for s, d in ts if w <= s < w + 0.25])) * 1e6)
        time.sleep(1.2)
    print(f"{harness.cpu_info()['model']}; mxcc {mxcc.__file__}; ONNX Runtime {ort.__version__}; MLP b{args.batch}, "
          f"{args.threads} threads")
    print(f"mxcc alone: {alone:.1f} us a call; after 200 ORT runs, median of {args.repeats} repeats per window:")
    for w in WINDOWS:
        print(f"  {w:.2f}-{w + 0.25:.2f} s: {np.median(wins[w]):.1f} us  (repeats {', '.join(f'{v:.0f}' for v in wins[w])})")
    print(f"dozes (mxcc_pool_caps): {lib.mxcc_pool_caps()}")


if __name__ == "__main__":
    main()
