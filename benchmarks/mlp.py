"""MLP inference, end to end from Python (numpy in, numpy out): mxcc vs ONNX Runtime, same weights.

    python benchmarks/mlp.py [--threads 1,2] [--batches 1,64,256] [--rounds 2] [--json out.jsonl]

The network is shared/mxnet-ref's `mlp` (MXNet's cpp-package MLP 784-128-64-10, MXNet's own JSON and
.params, copied to tests/data/models/mlp). ONNX Runtime runs the same graph written with the onnx helper API
(benchmarks/_onnx.py). Each thread count runs in a fresh process (benchmarks/harness.py). Also measured:
mxcc's Python call path alone (forward() minus the bare C call with the same bound pointers), and forward()
while the caller still holds the previous result (then it allocates fresh output arrays: "result kept";
the plain "mxcc" column drops each result, so forward writes the same arrays again, see Module.forward).
Needs `pip install onnx onnxruntime` (benchmark-only, not mxcc dependencies).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

MLP = HERE.parent / "tests" / "data" / "models" / "mlp"


def worker(spec: dict) -> list[dict]:
    import numpy as np
    import onnxruntime as ort
    import mxcc
    from mxcc.compiler.driver import plan_network
    from mxcc.options import CompileOptions
    from mxcc.params import load_params, split_arg_aux
    from _onnx import to_onnx

    threads = int(os.environ["OMP_NUM_THREADS"])
    params, _ = split_arg_aux(load_params(MLP / "mlp-0000.params"))
    results = []
    for batch in spec["batches"]:
        x = np.random.default_rng(0).standard_normal((batch, 784)).astype(np.float32)
        m = mxcc.compile(MLP / "mlp-symbol.json", {"X": (batch, 784)}, params, threads=threads)
        plan, _ = plan_network(MLP / "mlp-symbol.json", {"X": (batch, 784)}, CompileOptions())
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(to_onnx(plan.graph, params).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        ref = sess.run(None, {"X": x})[0]
        got = m.forward(X=x)[0]
        assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max(), "mxcc and ONNX Runtime disagree"
        keep = []

        def bare():
            if not keep:        # one forward binds every slot; keep its outputs alive while C writes them
                keep.append(m.forward(X=x))
            m._forward(m._ctx)

        last = [None]

        def held():             # the caller still holds the previous result: forward allocates fresh outputs
            last[0] = m.forward(X=x)

        for engine, fn in (("mxcc", lambda: m.forward(X=x)), ("onnxruntime", lambda: sess.run(None, {"X": x})),
                           ("mxcc C only", bare), ("mxcc result kept", held)):
            s = harness.summarize(harness.time_call(fn, min_time=spec["min_time"]))
            results.append({"bench": "mlp", "engine": engine, "batch": batch, "threads": threads, **s})
        del keep
    return results


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--batches", default="1,64,256")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    spec = {"batches": [int(b) for b in args.batches.split(",")], "min_time": args.min_time}
    pooled: dict[tuple, list] = {}
    for _ in range(args.rounds):
        for t in threads:
            for r in harness.run_worker(__file__, spec, t):
                pooled.setdefault((r["engine"], r["batch"], r["threads"]), []).append(r)
    rows = []
    for t in threads:
        for b in spec["batches"]:
            med = {e: min(r["median_s"] for r in pooled[(e, b, t)])
                   for e in ("mxcc", "onnxruntime", "mxcc C only", "mxcc result kept")}
            rows.append({"threads": t, "batch": b, "mxcc_us": med["mxcc"] * 1e6, "ort_us": med["onnxruntime"] * 1e6,
                         "speedup": med["onnxruntime"] / med["mxcc"], "c_us": med["mxcc C only"] * 1e6,
                         "py_us": (med["mxcc"] - med["mxcc C only"]) * 1e6, "kept_us": med["mxcc result kept"] * 1e6,
                         "kept_speedup": med["onnxruntime"] / med["mxcc result kept"]})
    print(f"MLP 784-128-64-10 (MXNet's mlp), numpy in -> numpy out; best round median; {harness.cpu_info()['model']}")
    harness.print_table(rows, [("threads", "threads"), ("batch", "batch"), ("mxcc us", "mxcc_us"),
                               ("onnxruntime us", "ort_us"), ("ORT/mxcc", "speedup"),
                               ("mxcc C-only us", "c_us"), ("python path us", "py_us"),
                               ("mxcc us, result kept", "kept_us"), ("ORT/that", "kept_speedup")])
    harness.append_jsonl(args.json, [dict(r, bench="mlp") for r in rows])


if __name__ == "__main__":
    main()
