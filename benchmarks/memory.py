"""Activation memory: mxcc's arena vs a buffer per tensor (naive) vs the lower bound, and MXNet's own plan.

    python benchmarks/memory.py [--batch 1] [--mxnet-python PATH] [--json out.jsonl]

For every network of examples/ and tests/data/models (the shared/mxnet-ref models): the arena the planner
chose (fused, in-place, two strategies, the smaller kept), the naive total of one buffer per intermediate,
and the lower bound (the most bytes live at one kernel step). No compiler run is needed (`mxcc inspect`'s
data). With a python that has mxnet==1.9.1, MXNet's planned memory for the same inference graph is read
from `executor.debug_str()` ("Total N MB allocated"; MXNet sizes every tensor as 4 bytes per element).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

MODELS = ROOT / "tests" / "data" / "models"

MXNET_PLAN = r'''
import json, re, sys
import mxnet as mx
sym = mx.sym.load(sys.argv[1])
shapes = json.loads(sys.argv[2])
ex = sym.simple_bind(mx.cpu(), grad_req="null", **{k: tuple(v) for k, v in shapes.items()})
m = re.search(r"Total (\d+) MB allocated", ex.debug_str())
print(json.dumps({"mb": int(m.group(1)) if m else None}))
'''


def networks(batch: int):
    yield "mlp (examples)", ROOT / "examples/data/mlp/mlp-symbol.json", {"X": (batch, 784)}
    for d in sorted(MODELS.iterdir()):
        rec = json.loads((d / "record.json").read_text())
        shape = [batch] + list(rec["input_shape"][1:])
        yield d.name, d / f"{d.name}-symbol.json", {rec.get("input_name", "data"): tuple(shape)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--mxnet-python", default=os.environ.get("MXNET_PYTHON"))
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    from mxcc.compiler.driver import inspect_network
    from mxcc.errors import MxccError
    from mxcc.options import CompileOptions
    rows = []
    for name, path, shapes in networks(args.batch):
        try:
            p = inspect_network(path, shapes, CompileOptions())
            u = inspect_network(path, shapes, CompileOptions(fuse=False))
        except MxccError as e:
            rows.append({"network": name, "arena": f"error: {e}"[:60]})
            continue
        row = {"network": name, "input": "x".join(map(str, next(iter(shapes.values())))),
               "kernels": f"{p['nodes']}->{p['kernels']}", "arena_mb": p["arena_bytes"] / 2**20,
               "naive_mb": p["naive_bytes"] / 2**20, "lower_mb": p["lower_bound_bytes"] / 2**20,
               "ratio": p["arena_bytes"] / max(p["lower_bound_bytes"], 1),
               "unfused_arena_mb": u["arena_bytes"] / 2**20, "unfused_naive_mb": u["naive_bytes"] / 2**20}
        if args.mxnet_python:
            r = subprocess.run([args.mxnet_python, "-c", MXNET_PLAN, str(path),
                                json.dumps({k: list(v) for k, v in shapes.items()})],
                               capture_output=True, text=True, timeout=600)
            row["mxnet_mb"] = json.loads(r.stdout.strip().splitlines()[-1])["mb"] if r.returncode == 0 else None
        rows.append(row)
    print(f"activation memory at batch {args.batch} (MiB; arena/lower = arena / lower bound)")
    cols = [("network", "network"), ("input", "input"), ("nodes->kernels", "kernels"), ("arena", "arena_mb"),
            ("lower bound", "lower_mb"), ("arena/lower", "ratio"), ("naive", "naive_mb"),
            ("unfused arena", "unfused_arena_mb"), ("unfused naive", "unfused_naive_mb")]
    if args.mxnet_python:
        cols.append(("MXNet plan (MB)", "mxnet_mb"))
    harness.print_table([{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in rows], cols)
    harness.append_jsonl(args.json, [dict(r, bench="memory", batch=args.batch) for r in rows])


if __name__ == "__main__":
    main()
