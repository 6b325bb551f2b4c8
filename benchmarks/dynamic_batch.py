"""Dynamic batch: what a small batch costs on a module compiled for a large maximum (compile(dynamic_batch=True))
against a module compiled for exactly that batch.

    python benchmarks/dynamic_batch.py [--threads 1,2] [--rounds 3] [--batches 1,3] [--json out.jsonl]

Networks: LeNet (max 64), the MLP 784-128-64-10 (max 256), ResNet-18 v1 (max 8), MXNet's JSON from
tests/data/models (random weights where the folder has none). Timed: the bare C forward (`<net>_forward` on bound
pointers, no Python path) of the max module at each batch and of the fixed module of that batch, in one worker
per thread count, rounds alternating (benchmarks/harness.py). Outputs are checked equal first (1e-5 of the max).
The issue's bound: batch 1 on the max module costs at most 1.25x the batch-1 module (target 1.05x).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import harness  # noqa: E402

MODELS = HERE.parent / "tests" / "data" / "models"
NETS = {"lenet": ("data", (64, 1, 28, 28)), "mlp": ("X", (256, 784)), "resnet18_v1": ("data", (8, 3, 224, 224))}


def _params(name: str, shapes: dict):
    import numpy as np
    from mxcc.params import load_params
    f = MODELS / name / f"{name}-0000.params"
    if f.exists():
        return load_params(f)
    rng = np.random.default_rng(0)
    out = {}
    for k, s in shapes.items():
        a = rng.standard_normal(s).astype(np.float32) * np.float32(1.0 / max(1, int(np.prod(s[1:])) ** 0.5))
        out[k] = np.abs(a) + 1 if k.endswith("var") else a
    return out


def worker(spec: dict) -> list[dict]:
    import numpy as np
    import mxcc

    threads = int(os.environ["OMP_NUM_THREADS"])
    results = []
    for name in spec["nets"]:
        inp, shape = NETS[name]
        symbol = MODELS / name / f"{name}-symbol.json"
        dyn = mxcc.compile(symbol, {inp: shape}, threads=threads, dynamic_batch=True)
        params = _params(name, dyn.param_shapes)
        dyn.set_params(params)
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        for batch in spec["batches"]:
            fixed = mxcc.compile(symbol, {inp: (batch, *shape[1:])}, params, threads=threads)
            a, b = fixed.forward(**{inp: x[:batch]})[0], dyn.forward(**{inp: x[:batch]})[0]
            assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max(), f"{name} batch {batch}: outputs differ"
            for kind, m in (("fixed", fixed), ("dynamic", dyn)):
                keep = [m.forward(**{inp: x[:batch]})]      # binds the slots at this batch; outputs stay alive
                s = harness.summarize(harness.time_call(lambda: m._forward(m._ctx), min_time=spec["min_time"]))
                results.append({"net": name, "kind": kind, "batch": batch, "max": shape[0], "threads": threads, **s})
                del keep
    return results


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--batches", default="1,3")
    ap.add_argument("--nets", default=",".join(NETS))
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    spec = {"batches": [int(b) for b in args.batches.split(",")], "nets": args.nets.split(","),
            "min_time": args.min_time}
    rounds: dict[tuple, list] = {}
    for _ in range(args.rounds):
        for t in threads:
            for r in harness.run_worker(__file__, spec, t):
                rounds.setdefault((r["net"], r["batch"], r["threads"], r["kind"]), []).append(r["median_s"])
    rows = []
    for t in threads:
        for net in spec["nets"]:
            for b in spec["batches"]:
                fixed, dyn = min(rounds[(net, b, t, "fixed")]), min(rounds[(net, b, t, "dynamic")])
                rows.append({"threads": t, "net": f"{net} (max {NETS[net][1][0]})", "batch": b,
                             "fixed_us": fixed * 1e6, "dynamic_us": dyn * 1e6, "ratio": dyn / fixed})
    print(f"C forward, best round median of {args.rounds}; {harness.cpu_info()['model']}")
    harness.print_table(rows, [("threads", "threads"), ("network", "net"), ("batch", "batch"),
                               ("fixed us", "fixed_us"), ("dynamic us", "dynamic_us"), ("dynamic/fixed", "ratio")])
    harness.append_jsonl(args.json, [dict(r, bench="dynamic_batch") for r in rows])


if __name__ == "__main__":
    main()
