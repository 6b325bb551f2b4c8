"""Pooling: one compiled Pooling op, mxcc's specialised paths vs its generic clipped loop vs ONNX Runtime.

    python3 benchmarks/pool.py [--threads 1,2] [--rounds 5] [--cases stem,...] [--json out.jsonl]

Run it with a Python that has onnxruntime (the pyenv `python3`; without onnxruntime the ORT column is
left out). Cases are the pools of the benchmark CNNs (benchmarks/cnn.py) and their relatives:
stem (ResNet-18: max 3x3 s2 p1, 64x112x112, batch 1), lenet1/lenet2 (LeNet: max 2x2 s2 at batch 64),
gap512/gap1024 (global avg pools of ResNet-18 / MobileNet tails, batch 1), avg3s1 (avg 3x3 s1 p1
count_include_pad, Inception/SqueezeNet style, 192x35x35). Timed: the bare C forward (`<net>_forward`,
bound pointers) for mxcc, `sess.run` for ORT; every engine is first checked against the generic build.
Rounds alternate thread counts, one fresh worker each (benchmarks/harness.py); the best round's median.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

CASES = {   # name: (data shape, Pooling attrs)
    "stem": ((1, 64, 112, 112), dict(pool_type="max", kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    "lenet1": ((64, 20, 24, 24), dict(pool_type="max", kernel=(2, 2), stride=(2, 2))),
    "lenet2": ((64, 50, 8, 8), dict(pool_type="max", kernel=(2, 2), stride=(2, 2))),
    "gap512": ((1, 512, 7, 7), dict(pool_type="avg", global_pool=True, kernel=(7, 7))),
    "gap1024": ((1, 1024, 7, 7), dict(pool_type="avg", global_pool=True, kernel=(7, 7))),
    "avg3s1": ((1, 192, 35, 35), dict(pool_type="avg", kernel=(3, 3), stride=(1, 1), pad=(1, 1))),
}


def worker(spec: dict) -> list[dict]:
    import numpy as np
    import mxcc
    from mxcc import sym
    from mxcc.ops import pooling

    threads = int(os.environ["OMP_NUM_THREADS"])
    results = []
    for case in spec["cases"]:
        shape, attrs = CASES[case]
        net = sym.Pooling(sym.var("data"), name="pool", **attrs)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        engines, ref = {}, None
        for fast in (False, True):
            pooling.FAST_PATHS = fast
            m = mxcc.compile(net, {"data": shape}, threads=threads, name="poolbench")
            got = m.forward(data=x)[0]
            ref = got if ref is None else ref
            assert np.abs(got - ref).max() <= 1e-6 * np.abs(ref).max(), f"{case}: fast path disagrees"
            keep = m.forward(data=x)       # binds the slots; its output stays alive while C writes it
            engines["mxcc" if fast else "generic"] = (lambda m=m: m._forward(m._ctx), m, keep)
        pooling.FAST_PATHS = True
        if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnx"):
            from _onnx import ort_session, to_onnx, typed_graph
            sess = ort_session(to_onnx(typed_graph(net, {"data": shape}), {}), threads)
            assert np.abs(sess.run(None, {"data": x})[0] - ref).max() <= 1e-5 * np.abs(ref).max(), case
            engines["onnxruntime"] = (lambda sess=sess, x=x: sess.run(None, {"data": x}), sess, None)
        for engine, (fn, *_) in engines.items():
            s = harness.summarize(harness.time_call(fn, min_time=spec["min_time"]))
            results.append({"bench": "pool", "case": case, "engine": engine, "threads": threads, **s})
    return results


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    spec = {"cases": args.cases.split(","), "min_time": args.min_time}
    rounds: dict[tuple, list] = {}
    for _ in range(args.rounds):
        for t in threads:
            for r in harness.run_worker(__file__, spec, t):
                rounds.setdefault((r["case"], r["threads"], r["engine"]), []).append(r["median_s"])
    rows = []
    for t in threads:
        for case in spec["cases"]:
            best = {e: min(v) * 1e6 for (c, tt, e), v in rounds.items() if c == case and tt == t}
            row = {"case": case, "threads": t, "generic_us": best["generic"], "mxcc_us": best["mxcc"],
                   "speedup": best["generic"] / best["mxcc"]}
            if "onnxruntime" in best:
                row.update(ort_us=best["onnxruntime"], vs_ort=best["mxcc"] / best["onnxruntime"])
            rows.append(row)
    print(f"Pooling, one op: best round median of {args.rounds}; {harness.cpu_info()['model']}")
    cols = [("case", "case"), ("threads", "threads"), ("generic us", "generic_us"), ("mxcc us", "mxcc_us"),
            ("generic/mxcc", "speedup")]
    if all("ort_us" in r for r in rows):
        cols += [("ORT us", "ort_us"), ("mxcc/ORT", "vs_ort")]
    harness.print_table(rows, cols)
    harness.append_jsonl(args.json, [dict(r, bench="pool") for r in rows])


if __name__ == "__main__":
    main()
