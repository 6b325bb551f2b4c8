"""CNN inference, end to end from Python (numpy in, numpy out): mxcc vs ONNX Runtime, same network, same weights.

    python benchmarks/cnn.py [--nets lenet,mobilenet1.0,resnet18_v1] [--batch 1,64] [--threads 1,2]
                             [--rounds 3] [--min-time 0.5] [--standalone] [--json out.jsonl]

Networks (tests/data/models): LeNet with MXNet's exported weights; MobileNet 1.0 and ResNet-18 v1 (MXNet's
Gluon model-zoo JSON, no params) with the weights `mxcc compile --random-params` gives them (Xavier, seed 0,
moving mean 0 / variance 1). ONNX Runtime runs the same graph written with the onnx helper API
(benchmarks/_onnx.py; it fuses Conv+BatchNorm+Relu itself) on its CPU provider: intra-op threads = thread
count, one inter-op thread, sequential, every graph optimization. Before timing, each worker checks that both
engines give the same output on the benchmark's input (max |mxcc - ORT| <= 1e-4 max |ORT|).

Each thread count runs in a fresh process per round (benchmarks/harness.py); rounds alternate the thread
counts; the headline time is the median of the least-disturbed round. ORT/mxcc > 1 means mxcc is faster.
`--standalone` also times the compiled `<net>_bench` C program (no Python; its mean per forward).
Needs `pip install onnx onnxruntime` (benchmark-only, not mxcc dependencies).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

MODELS = HERE.parent / "tests" / "data" / "models"
NETS = {   # name -> (input shape without the batch, MXNet params file or None for random weights)
    "lenet": ((1, 28, 28), "lenet-0000.params"),
    "mobilenet1.0": ((3, 224, 224), None),
    "resnet18_v1": ((3, 224, 224), None),
}
BIG_FLOP = 20e9       # above this many FLOPs per forward, time fewer calls (batch-64 MobileNet and ResNet)
TOLERANCE = 1e-4      # max |mxcc - ORT| relative to max |ORT|


def network_params(net: str, shape: tuple) -> dict:
    """{name: array} of every parameter and aux state (`aux:` prefix on the latter, as mxcc.compile takes)."""
    import mxcc
    from mxcc.initializer import Xavier, init_params
    from mxcc.params import load_params
    js = MODELS / net / f"{net}-symbol.json"
    file = NETS[net][1]
    if file:
        return load_params(MODELS / net / file)
    arg, aux = init_params(mxcc.sym.load(str(js)), {"data": shape}, Xavier(), seed=0)   # = --random-params
    return {**arg, **{f"aux:{k}": v for k, v in aux.items()}}


def _flops(plan_json: dict) -> int:
    return sum(g["flops"] for g in plan_json["groups"])


def _standalone(directory: Path, bench: str, threads: int, seconds: float) -> float:
    """Seconds per forward of the compiled C benchmark (its own mean over `seconds`, after 3 warm-ups)."""
    out = subprocess.run([str(directory / bench), "--seconds", str(seconds), "--warmup", "3",
                          "--threads", str(threads)], capture_output=True, text=True, check=True).stdout
    return float(re.search(r"([0-9.]+) us per forward", out).group(1)) * 1e-6


def worker(spec: dict) -> list[dict]:
    import numpy as np
    import mxcc
    from mxcc.compiler import inspect_network
    from mxcc.options import CompileOptions
    from mxcc.params import split_arg_aux
    from _onnx import ort_session, to_onnx, typed_graph

    threads = int(os.environ["OMP_NUM_THREADS"])
    results = []
    for net in spec["nets"]:
        js = MODELS / net / f"{net}-symbol.json"
        for batch in spec["batches"]:
            shape = (batch, *NETS[net][0])
            params = network_params(net, shape)
            flops = _flops(inspect_network(js, {"data": shape}, CompileOptions()))
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            with tempfile.TemporaryDirectory(prefix="mxcc-cnn-") as tmp:
                m = mxcc.compile(js, {"data": shape}, params, threads=threads, name=net.replace(".", "_"),
                                 out_dir=tmp if spec["standalone"] else None)   # out_dir: for <net>_bench
                arg, aux = split_arg_aux(params)
                sess = ort_session(to_onnx(typed_graph(js, {"data": shape}), {**arg, **aux}), threads)
                ref = sess.run(None, {"data": x})[0]
                got = m.forward(data=x)[0]
                err = float(np.abs(got - ref).max() / np.abs(ref).max())
                if not err <= TOLERANCE:
                    raise AssertionError(f"{net} batch {batch}: mxcc and ONNX Runtime disagree ({err:.2e})")
                big = flops > BIG_FLOP
                timing = dict(min_time=0.0 if big else spec["min_time"], min_repeats=3 if big else 10,
                              warmup_time=0.0 if big else 0.05)
                engines = [("mxcc", lambda: m.forward(data=x)), ("onnxruntime", lambda: sess.run(None, {"data": x}))]
                for engine, fn in engines:
                    s = harness.summarize(harness.time_call(fn, **timing))
                    results.append({"bench": "cnn", "net": net, "engine": engine, "batch": batch, "threads": threads,
                                    "flops": flops, "rel_err": err, **s})
                if spec["standalone"]:
                    t = _standalone(Path(tmp), m.meta["bench"], threads, 0.0 if big else spec["min_time"])
                    results.append({"bench": "cnn", "net": net, "engine": "mxcc C bench", "batch": batch,
                                    "threads": threads, "flops": flops, "median_s": t})
            del m, sess
    return results


def main() -> None:
    spec = harness.worker_spec_from_argv()
    if spec is not None:
        harness.emit_worker_results(worker(spec))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_args(ap)
    ap.add_argument("--nets", default=",".join(NETS), help=f"comma-separated, of {', '.join(NETS)}")
    ap.add_argument("--batch", default="1,64", help="comma-separated batch sizes (default 1,64)")
    ap.add_argument("--standalone", action="store_true", help="also time the compiled <net>_bench C program")
    args = ap.parse_args()
    nets = args.nets.split(",")
    for n in nets:
        if n not in NETS:
            ap.error(f"unknown net {n!r} (known: {', '.join(NETS)})")
    threads = [int(t) for t in args.threads.split(",")]
    spec = {"nets": nets, "batches": [int(b) for b in args.batch.split(",")], "min_time": args.min_time,
            "standalone": int(args.standalone)}
    pooled: dict[tuple, list] = {}
    for _ in range(args.rounds):
        for t in threads:
            for r in harness.run_worker(__file__, spec, t):
                pooled.setdefault((r["net"], r["engine"], r["batch"], r["threads"]), []).append(r)
    rows = []
    for net in nets:
        for b in spec["batches"]:
            for t in threads:
                best = {e: min(r["median_s"] for r in pooled[(net, e, b, t)])
                        for e in ("mxcc", "onnxruntime", "mxcc C bench") if (net, e, b, t) in pooled}
                mx, ort_ = best["mxcc"], best["onnxruntime"]
                rounds = pooled[(net, "mxcc", b, t)]
                row = {"net": net, "batch": b, "threads": t, "mxcc_ms": mx * 1e3, "ort_ms": ort_ * 1e3,
                       "ratio": ort_ / mx, "mxcc_img_s": b / mx, "ort_img_s": b / ort_,
                       "mxcc_gflops": rounds[0]["flops"] / mx * 1e-9,
                       "mxcc_rounds_ms": "/".join(f"{r['median_s'] * 1e3:.3g}" for r in rounds),
                       "ort_rounds_ms": "/".join(f"{r['median_s'] * 1e3:.3g}"
                                                 for r in pooled[(net, "onnxruntime", b, t)]),
                       "rel_err": max(r["rel_err"] for r in rounds)}
                if "mxcc C bench" in best:
                    row["c_bench_ms"] = best["mxcc C bench"] * 1e3
                rows.append(row)
    import onnxruntime
    print(f"CNN inference, numpy in -> numpy out; ONNX Runtime {onnxruntime.__version__}; median of the best of "
          f"{args.rounds} rounds; {harness.cpu_info()['model']}, {os.cpu_count()} CPUs")
    cols = [("net", "net"), ("batch", "batch"), ("thr", "threads"), ("mxcc ms", "mxcc_ms"), ("ORT ms", "ort_ms"),
            ("ORT/mxcc", "ratio"), ("mxcc img/s", "mxcc_img_s"), ("ORT img/s", "ort_img_s"),
            ("mxcc GFLOP/s", "mxcc_gflops"), ("mxcc rounds ms", "mxcc_rounds_ms"), ("ORT rounds ms", "ort_rounds_ms")]
    if args.standalone:
        cols.insert(5, ("C bench ms", "c_bench_ms"))
    harness.print_table(rows, cols)
    print(f"outputs agree: max |mxcc - ORT| / max |ORT| <= {max(r['rel_err'] for r in rows):.1e}")
    harness.append_jsonl(args.json, [dict(r, bench="cnn", onnxruntime=onnxruntime.__version__) for r in rows])


if __name__ == "__main__":
    main()
