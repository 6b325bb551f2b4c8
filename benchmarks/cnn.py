"""CNN inference, end to end from Python (numpy in, numpy out): mxcc vs ONNX Runtime, same network, same weights.

    python benchmarks/cnn.py [--nets lenet,mobilenet1.0,resnet18_v1] [--batch 1,64] [--threads 1,2]
                             [--rounds 3] [--min-time 0.25] [--standalone] [--json out.jsonl]
    python benchmarks/cnn.py --layers 30 --nets resnet18_v1 --batch 1 --threads 1     # per layer, both engines

Networks (tests/data/models): LeNet with MXNet's exported weights; MobileNet 1.0 and ResNet-18 v1 (MXNet's
Gluon model-zoo JSON, no params) with the weights `mxcc compile --random-params` gives them (Xavier, seed 0,
moving mean 0 / variance 1). ONNX Runtime runs the same graph written with the onnx helper API
(benchmarks/_onnx.py; it fuses Conv+BatchNorm+Relu itself) on its CPU provider: intra-op threads = thread
count, one inter-op thread, sequential, every graph optimization. Before timing, each worker checks that both
engines give the same output on the benchmark's input (max |mxcc - ORT| <= 1e-4 max |ORT|).

Each thread count runs in a fresh process per round (benchmarks/harness.py); rounds alternate the thread
counts; the headline time is the median of the least-disturbed round. ORT/mxcc > 1 means mxcc is faster.
Each round times both engines one after the other, so the rounds also pair them: `paired` is the median over
rounds of that round's ORT/mxcc and `mxcc won` the rounds where mxcc was faster (the host's slow phases shift
both engines of a round, and a win in most rounds is a difference the noise does not explain).
`--standalone` also times the compiled `<net>_bench` C program (no Python; its mean per forward).
`--layers CALLS` instead prints, per mxcc kernel, its time from mxcc's profiler beside the time ORT's profiler
gives its nodes computing the same MXNet nodes (one process; a diagnostic, not the benchmark).
Needs `pip install onnx onnxruntime` (benchmark-only, not mxcc dependencies).
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
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
    "resnet50_v1": ((3, 224, 224), None),
    "squeezenet1.1": ((3, 224, 224), None),
    "mobilenetv2_1.0": ((3, 224, 224), None),     # benchmarks/models/: exported from MXNet 1.9.1's model zoo
    "mlp": ((784,), "mlp-0000.params"),           # MXNet's cpp-package MLP, 784-128-64-10
}
DEFAULT_NETS = "lenet,mobilenet1.0,resnet18_v1"


def symbol_json(net: str) -> Path:
    """The network's MXNet JSON: tests/data/models/<net>/, or benchmarks/models/<net>/ (benchmark-only graphs)."""
    for d in (MODELS, HERE / "models"):
        if (d / net / f"{net}-symbol.json").exists():
            return d / net / f"{net}-symbol.json"
    raise FileNotFoundError(f"no {net}-symbol.json in {MODELS} or {HERE / 'models'}")


def input_name(net: str) -> str:
    """The graph's data input: its first variable (`data`, or `X` for the MLP)."""
    import json
    return next(n["name"] for n in json.loads(symbol_json(net).read_text())["nodes"] if n["op"] == "null")
BIG_FLOP = 20e9       # above this many FLOPs per forward, time fewer calls (batch-64 MobileNet and ResNet)
TOLERANCE = 1e-4      # max |mxcc - ORT| relative to max |ORT|


def network_params(net: str, shape: tuple) -> dict:
    """{name: array} of every parameter and aux state (`aux:` prefix on the latter, as mxcc.compile takes)."""
    import mxcc
    from mxcc.initializer import Xavier, init_params
    from mxcc.params import load_params
    js = symbol_json(net)
    file = NETS[net][1]
    if file:
        return load_params(js.parent / file)
    arg, aux = init_params(mxcc.sym.load(str(js)), {input_name(net): shape}, Xavier(), seed=0)   # --random-params
    return {**arg, **{f"aux:{k}": v for k, v in aux.items()}}


def _flops(plan_json: dict) -> int:
    return sum(g["flops"] for g in plan_json["groups"])


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _standalone(directory: Path, bench: str, threads: int, seconds: float, iters: int) -> float:
    """Seconds per forward of the compiled C benchmark: its own mean over `seconds` (or `iters` forwards when
    seconds is 0), after 3 warm-up forwards (1 then)."""
    run = ["--seconds", str(seconds), "--warmup", "3"] if seconds > 0 else ["--iters", str(iters), "--warmup", "1"]
    out = subprocess.run([str(directory / bench), *run,
                          "--threads", str(threads)], capture_output=True, text=True, check=True).stdout
    return float(re.search(r"([0-9.]+) us per forward", out).group(1)) * 1e-6


def worker(spec: dict) -> list[dict]:
    import numpy as np
    import mxcc
    from mxcc.compiler.driver import inspect_network
    from mxcc.options import CompileOptions
    from mxcc.params import split_arg_aux
    from _onnx import ort_session, to_onnx, typed_graph

    threads = int(os.environ["OMP_NUM_THREADS"])
    results = []
    for net in spec["nets"]:
        js, data = symbol_json(net), input_name(net)
        for batch in spec.get("net_batches", {}).get(net, spec["batches"]):
            shape = (batch, *NETS[net][0])
            params = network_params(net, shape)
            flops = _flops(inspect_network(js, {data: shape}, CompileOptions()))
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            with tempfile.TemporaryDirectory(prefix="mxcc-cnn-") as tmp:
                m = mxcc.compile(js, {data: shape}, params, threads=threads, name=net.replace(".", "_"),
                                 out_dir=tmp if spec["standalone"] else None)   # out_dir: for <net>_bench
                arg, aux = split_arg_aux(params)
                sess = ort_session(to_onnx(typed_graph(js, {data: shape}), {**arg, **aux}), threads)
                ref = sess.run(None, {data: x})[0]
                got = m.forward(**{data: x})[0]
                err = float(np.abs(got - ref).max() / np.abs(ref).max())
                if not err <= TOLERANCE:
                    raise AssertionError(f"{net} batch {batch}: mxcc and ONNX Runtime disagree ({err:.2e})")
                big = flops > BIG_FLOP
                engines = [("mxcc", lambda: m.forward(**{data: x})), ("onnxruntime", lambda: sess.run(None, {data: x}))]
                for engine, fn in engines:
                    if big:   # seconds per call: the check above was the warm-up; 3 calls per round
                        samples = [_timed(fn) for _ in range(3)]
                    else:
                        # min_time of calls whatever their length (harness's 2000 calls would end an MLP's 10-100
                        # us calls after 0.02-0.25 s, before a pool has seen a busy machine, --busy)
                        samples = harness.time_call(fn, min_time=spec["min_time"], max_repeats=1_000_000)
                    results.append({"bench": "cnn", "net": net, "engine": engine, "batch": batch, "threads": threads,
                                    "flops": flops, "rel_err": err, **harness.summarize(samples)})
                if spec["standalone"]:
                    t = _standalone(Path(tmp), m.meta["bench"], threads, 0.0 if big else spec["min_time"], 2)
                    results.append({"bench": "cnn", "net": net, "engine": "mxcc C bench", "batch": batch,
                                    "threads": threads, "flops": flops, "median_s": t})
            del m, sess
    return results


def _mxcc_layers(m, x, calls: int, path: Path, data: str = "data") -> dict[str, tuple[list[str], str, float]]:
    """{kernel: (its MXNet node names, its op types, median seconds per call)} from mxcc's profiler over `calls`
    forwards."""
    import json
    import statistics
    from mxcc import profiler
    profiler.set_config(filename=str(path), continuous_dump=False)
    profiler.set_state("run")
    for _ in range(calls):
        m.forward(**{data: x})
    profiler.set_state("stop")
    profiler.dump()
    times: dict[str, list] = {}
    members = {}
    for e in json.loads(path.read_text())["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") not in ("pass", "scope") and "members" in e.get("args", {}):
            times.setdefault(e["name"], []).append(e["dur"] * 1e-6)
            members[e["name"]] = (e["args"]["members"], e["cat"])
    return {k: (*members[k], statistics.median(v)) for k, v in times.items()}


def _ort_layers(model, threads: int, x, calls: int, prefix: str, data: str = "data") -> dict[str, float]:
    """{ONNX Runtime node name: median seconds per call} from ORT's own profiler over `calls` runs."""
    import json
    import statistics
    from _onnx import ort_options, ort_session
    so = ort_options(threads)
    so.enable_profiling, so.profile_file_prefix = True, prefix
    sess = ort_session(model, threads, so)
    sess.run(None, {data: x})
    for _ in range(calls):
        sess.run(None, {data: x})
    times: dict[str, list] = {}
    for e in json.loads(Path(sess.end_profiling()).read_text()):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times.setdefault(e["name"][: -len("_kernel_time")], []).append(e["dur"] * 1e-6)
    return {k: statistics.median(v[1:]) for k, v in times.items()}   # v[0]: the warm-up run


def layers(net: str, batch: int, threads: int, calls: int) -> None:
    """Per-layer times, mxcc kernel by kernel beside the ONNX Runtime nodes computing the same MXNet nodes
    (ORT's nodes are named `<MXNet node>_out...` by _onnx.py; fused ones keep their first node's name)."""
    import numpy as np
    import mxcc
    from mxcc.params import split_arg_aux
    from _onnx import to_onnx, typed_graph
    js, data = symbol_json(net), input_name(net)
    shape = (batch, *NETS[net][0])
    params = network_params(net, shape)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    arg, aux = split_arg_aux(params)
    model = to_onnx(typed_graph(js, {data: shape}), {**arg, **aux})
    m = mxcc.compile(js, {data: shape}, params, threads=threads, name=net.replace(".", "_"))
    with tempfile.TemporaryDirectory(prefix="mxcc-cnn-") as tmp:
        mine = _mxcc_layers(m, x, calls, Path(tmp) / "mxcc.json", data)
        theirs = _ort_layers(model, threads, x, calls, str(Path(tmp) / "ort"), data)
    owner = {mem: k for k, (mems, _, _) in mine.items() for mem in mems}
    ort_of: dict[str, float] = {}
    other: dict[str, float] = {}
    for name, t in theirs.items():
        base = name.removeprefix("fused ").split("_out")[0]   # ORT: "fused fc1_out", "relu1_out_nchwc"
        if base in owner:
            ort_of[owner[base]] = ort_of.get(owner[base], 0.0) + t
        else:          # ORT's own nodes (layout reorders of its NCHWc transform), or no-op in mxcc (Flatten)
            other[name] = t
    rows = [{"kernel": mems[0], "ops": ops, "mxcc_us": t * 1e6, "ort_us": ort_of.get(k, 0.0) * 1e6,
             "ratio": (ort_of[k] / t) if ort_of.get(k) else None} for k, (mems, ops, t) in mine.items()]
    rows.append({"kernel": "(other ORT nodes)", "ops": ", ".join(sorted(other))[:50], "mxcc_us": 0.0,
                 "ort_us": sum(other.values()) * 1e6})
    rows.append({"kernel": "total", "mxcc_us": sum(r["mxcc_us"] for r in rows),
                 "ort_us": sum(r["ort_us"] for r in rows)})
    rows[-1]["ratio"] = rows[-1]["ort_us"] / rows[-1]["mxcc_us"]
    print(f"{net} batch {batch}, {threads} thread(s): median per call over {calls} forwards, from each engine's "
          f"own profiler")
    harness.print_table(rows, [("kernel", "kernel"), ("mxcc us", "mxcc_us"), ("ORT us", "ort_us"),
                               ("ORT/mxcc", "ratio"), ("ops (mxcc kernel)", "ops")])


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--nets", default=DEFAULT_NETS, help=f"comma-separated, of {', '.join(NETS)}")
    ap.add_argument("--batch", default="1,64", help="comma-separated batch sizes (default 1,64)")
    ap.add_argument("--standalone", action="store_true", help="also time the compiled <net>_bench C program")
    ap.add_argument("--layers", type=int, metavar="CALLS",
                    help="instead: per-layer times of mxcc and ORT (their profilers, CALLS forwards), in this process")
    args = ap.parse_args()
    nets = args.nets.split(",")
    for n in nets:
        if n not in NETS:
            ap.error(f"unknown net {n!r} (known: {', '.join(NETS)})")
    threads = [int(t) for t in args.threads.split(",")]
    if args.layers:
        for net in nets:
            for b in args.batch.split(","):
                for t in threads:
                    layers(net, int(b), t, args.layers)
        return
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
                # each round timed both engines one after the other: a paired comparison, robust to the
                # host's slow phases (which shift both)
                paired = [o["median_s"] / m["median_s"] for m, o in zip(rounds, pooled[(net, "onnxruntime", b, t)])]
                row = {"net": net, "batch": b, "threads": t, "mxcc_ms": mx * 1e3, "ort_ms": ort_ * 1e3,
                       "ratio": ort_ / mx, "paired_ratio": statistics.median(paired),
                       "won": f"{sum(r > 1 for r in paired)}/{len(paired)}",
                       "mxcc_img_s": b / mx, "ort_img_s": b / ort_,
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
            ("ORT/mxcc", "ratio"), ("paired", "paired_ratio"), ("mxcc won", "won"), ("mxcc img/s", "mxcc_img_s"),
            ("ORT img/s", "ort_img_s"), ("mxcc GFLOP/s", "mxcc_gflops"), ("mxcc rounds ms", "mxcc_rounds_ms"),
            ("ORT rounds ms", "ort_rounds_ms")]
    if args.standalone:
        cols.insert(5, ("C bench ms", "c_bench_ms"))
    harness.print_table(rows, cols)
    print(f"outputs agree: max |mxcc - ORT| / max |ORT| <= {max(r['rel_err'] for r in rows):.1e}")
    harness.append_jsonl(args.json, [dict(r, bench="cnn", onnxruntime=onnxruntime.__version__) for r in rows])


if __name__ == "__main__":
    main()
