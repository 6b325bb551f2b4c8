"""mxcc's f32 GEMM against numpy (OpenBLAS), 1 and 2 threads, square sizes and the layer shapes mxcc emits.

    python benchmarks/gemm.py [--threads 1,2] [--rounds 3] [--json out.jsonl] [--haswell] [--quick]

Cases: square C = A·B (64..2048); FullyConnected y = relu(x·W^T + b) with W (N, K) as MXNet stores it
(mxcc: trans_b = 1 and a bias+relu epilogue; numpy: np.maximum(x @ W.T + b, 0), its extra passes
included); ResNet-18 im2col convolutions C[Cout, HW] = W[Cout, Cin·9] · col[Cin·9, HW].
Every (implementation, thread count) runs in its own fresh process (benchmarks/harness.py), alternating
over --rounds rounds; GFLOP/s is 2·M·N·K over the median time of the least-disturbed round (noise on a
shared machine only ever slows a round down), the spread is the interquartile range of all samples.
mxcc is called through cffi with its pointers bound beforehand, as generated code calls it.
% of peak is of the FMA ceiling measured on this machine by benchmarks/fma_peak.c (one core, turbo
included), times the thread count; without gcc it falls back to 2 FMA units x 8 lanes x 2 FLOP x the nominal
'cpu MHz' of /proc/cpuinfo, which turbo can pass (over 100%).
--haswell adds numpy with OPENBLAS_CORETYPE=Haswell: OpenBLAS limited to AVX2, the ISA mxcc targets.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness  # noqa: E402

BUILD_DIR = Path(tempfile.gettempdir()) / "mxcc-bench-gemm"

SQUARE = [64, 128, 256, 512, 1024, 2048]
FC = [(m, 784, 128) for m in (1, 64, 100, 256)] + [(m, 128, 64) for m in (1, 64, 100, 256)] + \
     [(m, 800, 512) for m in (1, 64, 100, 256)]  # (batch M, in K, hidden N)
CONV = [(64, 3136, 576, "res2 3x3"), (128, 784, 1152, "res3 3x3"), (256, 196, 2304, "res4 3x3"),
        (512, 49, 4608, "res5 3x3"), (64, 12544, 147, "stem 7x7")]  # (Cout M, HW N, Cin*k*k K)


def cases(quick: bool = False) -> list[dict]:
    out = [{"name": f"square {n}", "kind": "square", "M": n, "N": n, "K": n}
           for n in (SQUARE[:4] if quick else SQUARE)]
    out += [{"name": f"fc {k}->{n} b{m}", "kind": "fc", "M": m, "N": n, "K": k} for m, k, n in FC]
    out += [{"name": f"conv {label}", "kind": "conv", "M": m, "N": n, "K": k} for m, n, k, label in CONV]
    return out


# ---- worker: times one implementation at the thread count its environment fixed ------------------------


def _mxcc_fn(case, rng):
    import numpy as np

    from benchmarks._build_gemm import build_gemm

    ffi, lib = build_gemm(BUILD_DIR)
    M, N, K = case["M"], case["N"], case["K"]
    keep = []  # arrays and cdata that must outlive the timed calls

    def buf(x):
        keep.append(x)
        keep.append(ffi.from_buffer("float[]", x))
        return keep[-1]

    ws = lib.mxcc_gemm_ws_create(0)
    keep.append(ffi.gc(ws, lib.mxcc_gemm_ws_free))
    C = np.empty((M, N), np.float32)
    if case["kind"] == "fc":  # y = relu(x . W^T + b): W is (N, K), trans_b = 1, bias+relu epilogue
        x = rng.standard_normal((M, K), dtype=np.float32)
        W = rng.standard_normal((N, K), dtype=np.float32)
        ep = ffi.new("mxcc_epilogue *", {"bias": buf(rng.standard_normal(N, dtype=np.float32)),
                                         "act": lib.MXCC_ACT_RELU})
        keep.append(ep)
        args = (ws, 0, 1, M, N, K, buf(x), K, buf(W), K, 0.0, buf(C), N, ep)
    else:
        A = rng.standard_normal((M, K), dtype=np.float32)
        B = rng.standard_normal((K, N), dtype=np.float32)
        args = (ws, 0, 0, M, N, K, buf(A), K, buf(B), N, 0.0, buf(C), N, ffi.NULL)
    gemm = lib.mxcc_gemm_f32
    return lambda: gemm(*args), keep


def _numpy_fn(case, rng):
    import numpy as np

    M, N, K = case["M"], case["N"], case["K"]
    if case["kind"] == "fc":
        x = rng.standard_normal((M, K), dtype=np.float32)
        W = rng.standard_normal((N, K), dtype=np.float32)
        b = rng.standard_normal(N, dtype=np.float32)
        return lambda: np.maximum(x @ W.T + b, 0), (x, W, b)
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    return lambda: A @ B, (A, B)


def _blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed (pip install threadpoolctl)"
    infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(f"{i.get('internal_api')} {i.get('version')} coretype={i.get('architecture')} "
                     f"threads={i.get('num_threads')}" for i in infos) or "no BLAS found by threadpoolctl"


def worker(spec: dict) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(0)
    make = _mxcc_fn if spec["impl"] == "mxcc" else _numpy_fn
    results = []
    for case in spec["cases"]:
        fn, _keep = make(case, rng)
        samples = harness.time_call(fn, min_time=spec["min_time"])
        results.append({"case": case["name"], "samples": samples})
    return [{"blas": _blas_info() if spec["impl"] != "mxcc" else None, "results": results}]


# ---- driver -------------------------------------------------------------------------------------------


def measured_fma_peak() -> tuple[float | None, str]:
    """GFLOP/s of one core's FMA units as benchmarks/fma_peak.c measures them (its own ISA), or None
    without a C compiler."""
    import re
    import subprocess
    import os
    exe = BUILD_DIR / "fma_peak"
    tmp = BUILD_DIR / f"fma_peak.{os.getpid()}.tmp"   # then renamed: a concurrent run never sees half a file
    try:
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-O3", "-march=native", str(Path(__file__).with_name("fma_peak.c")), "-o", str(tmp)],
                       check=True, capture_output=True)
        os.replace(tmp, exe)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, ""
    m = re.match(r"(\S+) FMA peak, 1 thread: ([0-9.]+) GFLOP/s", out)
    return (float(m.group(2)), f"measured {m.group(1)} FMA peak (benchmarks/fma_peak.c)") if m else (None, "")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_common_args(parser)
    parser.add_argument("--haswell", action="store_true",
                        help="also time numpy with OPENBLAS_CORETYPE=Haswell (AVX2 kernels)")
    parser.add_argument("--quick", action="store_true", help="square sizes up to 512 only")
    args = parser.parse_args(argv)
    from benchmarks._build_gemm import build_gemm

    build_gemm(BUILD_DIR)  # compile once; the workers import the build
    thread_counts = [int(t) for t in args.threads.split(",")]
    impls = [("mxcc", None), ("numpy", None)] + ([("numpy-haswell", "Haswell")] if args.haswell else [])
    todo = cases(args.quick)
    pooled: dict = {}
    blas: dict = {}
    for _ in range(args.rounds):
        for threads in thread_counts:
            for impl, coretype in impls:
                spec = {"impl": impl, "cases": todo, "min_time": args.min_time}
                (out,) = harness.run_worker(__file__, spec, threads, coretype=coretype)
                blas[(impl, threads)] = out["blas"]
                for res in out["results"]:
                    pooled.setdefault((res["case"], threads, impl), []).append(res["samples"])

    cpu = harness.cpu_info()
    peak_core, how = measured_fma_peak()
    mhz = cpu["mhz"] or 0.0
    if peak_core is None:
        peak_core = 2 * 8 * 2 * mhz / 1e3  # GFLOP/s per core: 2 FMA units x 8 f32 lanes x 2 FLOP x GHz
        how = f"cpu MHz {mhz:.0f} (nominal) -> AVX2 FMA peak"
    print(f"cpu: {cpu['model']}, {cpu['cores']} cores, {how} {peak_core:.1f} GFLOP/s/core")
    for (impl, threads), info in sorted(blas.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if info:
            print(f"{impl} at {threads} thread(s): {info}")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    rows, records = [], []
    for case in todo:
        flops = 2.0 * case["M"] * case["N"] * case["K"]
        for threads in thread_counts:
            row = {"case": case["name"], "shape": f"{case['M']}x{case['N']}x{case['K']}", "thr": threads}
            for impl, _ in impls:
                stats = harness.summarize_rounds(pooled[(case["name"], threads, impl)])
                gflops = flops / stats["median_s"] / 1e9
                row[impl] = gflops
                row[impl + " iqr"] = f"{flops / stats['q3_s'] / 1e9:.0f}-{flops / stats['q1_s'] / 1e9:.0f}"
                records.append({"bench": "gemm", "time": stamp, "case": case["name"], "M": case["M"],
                                "N": case["N"], "K": case["K"], "threads": threads, "impl": impl,
                                "gflops": gflops, "blas": blas.get((impl, threads)), "cpu_mhz": mhz, **stats})
            row["us"] = flops / row["mxcc"] / 1e3
            row["vs numpy"] = row["mxcc"] / row["numpy"]
            row["%peak"] = 100.0 * row["mxcc"] / (peak_core * threads) if peak_core else None
            if args.haswell:
                row["vs hsw"] = row["mxcc"] / row["numpy-haswell"]
            rows.append(row)
    columns = [("case", "case"), ("MxNxK", "shape"), ("thr", "thr"), ("mxcc us", "us"),
               ("mxcc GF/s", "mxcc"), ("(iqr)", "mxcc iqr"), ("numpy GF/s", "numpy"), ("(iqr)", "numpy iqr"),
               ("mxcc/numpy", "vs numpy"), ("%peak", "%peak")]
    if args.haswell:
        columns += [("np-hsw GF/s", "numpy-haswell"), ("mxcc/np-hsw", "vs hsw")]
    harness.print_table(rows, columns)
    harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    spec = harness.worker_spec_from_argv()
    if spec is not None:
        harness.emit_worker_results(worker(spec))
    else:
        main()
