"""Thread scaling, mxcc vs ONNX Runtime, from 1 thread to every core: the networks of the model zoo at batch 1 and
32 and the MLP at batch 1, 64 and 256, side by side in one run, with the CPU model in the output.

    python benchmarks/scaling.py [--threads 1,2,4,8,16] [--nets ...] [--batches 1] [--rounds 2] [--min-time 0.2]
                                 [--quick] [--busy N] [--json out.jsonl]

Default threads: 1, 2, 4, ... up to the CPU count, and the CPU count itself. `--quick`: ResNet-18, MobileNet 1.0
and the MLP only, batch 1 (and the MLP at 256), one round: what fits a short slot on a borrowed machine.
The worker is benchmarks/cnn.py's (same weights, inputs, output check and ORT settings: intra-op threads = the
thread count, sequential, all graph optimizations); each (thread count, round) runs in a fresh process, the
rounds alternate the thread counts, and both engines are timed in each round (`paired`: the median of the
rounds' ORT/mxcc; > 1 means mxcc is faster). The summary gives per network and batch, for each thread count,
mxcc's time, ORT/mxcc, and each engine's speed-up over its own 1-thread time. Times are medians of calls;
`by mean` is ORT/mxcc of the best rounds' mean times (throughput): with `--busy` the calls split into those no
preemption touched and those it did, and the median sees only the first (one core busy, 2 threads, ORT's MLP
b256 read median 0.26 ms and mean 0.56 ms). Networks over 20 GFLOP (batch 32) take 3 calls per round. The
output also says what share of a CPU one spinning process per CPU got just before the run (harness.cpu_shares):
below 0.95, the host held the VM back and the multi-thread rows measure that too; and what handing data
between two cores cost before and after the run (harness.cross_core): a VM whose vCPUs the host placed far
apart runs every multi-thread row of both engines slower.

On a bare many-core machine with numpy, onnx and onnxruntime but not mxcc's dependencies, carry wheels:
    pip download --no-deps --only-binary=:all: -d .whl cffi pycparser jinja2 markupsafe   (for its Python)
    pip install --no-index --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site:. python benchmarks/scaling.py
(mxcc itself runs from the checkout: benchmarks/cnn.py puts the repository first on sys.path; gcc is needed.)
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import cnn  # noqa: E402
import harness  # noqa: E402

CNNS = ["resnet18_v1", "resnet50_v1", "mobilenet1.0", "mobilenetv2_1.0", "squeezenet1.1"]
BATCHES = {**{n: [1, 32] for n in CNNS}, "mlp": [1, 64, 256]}
QUICK = {"resnet18_v1": [1], "mobilenet1.0": [1], "mlp": [1, 256]}


def default_threads() -> list[int]:
    cores = os.cpu_count() or 1
    ts = [1]
    while ts[-1] * 2 <= cores:
        ts.append(ts[-1] * 2)
    return ts if ts[-1] == cores else ts + [cores]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default=",".join(map(str, default_threads())))
    ap.add_argument("--nets", default=",".join([*CNNS, "mlp"]))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds of calls per timing (small networks)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batches", help="only these of each network's batches (comma-separated)")
    ap.add_argument("--json", help="append the rows to this JSON-lines file")
    ap.add_argument("--busy", type=int, default=0,
                    help="keep this many other processes busy (a spinning loop each) for the whole run: a machine "
                         "shared with other work, as servers are")
    args = ap.parse_args()
    shares = harness.cpu_shares()   # before the busy processes: what the host gives this VM now
    cross = harness.cross_core()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        run(args, shares, cross)
    finally:
        for p in busy:
            p.kill()


def run(args, shares: list[float], cross: dict | None) -> None:
    threads = [int(t) for t in args.threads.split(",")]
    batches = QUICK if args.quick else {n: BATCHES[n] for n in args.nets.split(",")}
    if args.batches:
        keep = {int(b) for b in args.batches.split(",")}
        batches = {n: [b for b in bs if b in keep] for n, bs in batches.items() if set(bs) & keep}
    rounds = 1 if args.quick else args.rounds
    spec = {"nets": list(batches), "batches": [], "net_batches": batches, "min_time": args.min_time,
            "standalone": 0}
    pooled: dict[tuple, list] = {}
    for r in range(rounds):
        for t in threads:
            for row in harness.run_worker(cnn.__file__, spec, t):
                pooled.setdefault((row["net"], row["engine"], row["batch"], t), []).append(row)
            print(f"round {r + 1}/{rounds}: {t} thread(s) done", file=sys.stderr, flush=True)
    import onnxruntime
    print(f"Thread scaling, numpy in -> numpy out; ONNX Runtime {onnxruntime.__version__}; best of {rounds} "
          f"round(s); {harness.cpu_info()['model']}, {os.cpu_count()} CPUs"
          + (f"; {args.busy} other process(es) busy throughout" if args.busy else ""))
    print(f"Host check before the run: {len(shares)} spinning processes got "
          f"{', '.join(f'{x:.2f}' for x in shares)} of a CPU each"
          + ("" if min(shares) >= 0.95 else " (the host held this machine back: multi-thread rows measure it too)"))
    after = harness.cross_core() if not args.busy else None   # a busy process would be in the measurement
    print(f"Cross-core before the run: {harness.describe_cross_core(cross)}"
          + (f"; after: {harness.describe_cross_core(after)}" if after else ""))
    rows = []
    for net, bs in batches.items():
        for b in bs:
            one = {e: min(x["median_s"] for x in pooled[(net, e, b, threads[0])]) for e in ("mxcc", "onnxruntime")}
            for t in threads:
                best = {e: min(x["median_s"] for x in pooled[(net, e, b, t)]) for e in ("mxcc", "onnxruntime")}
                paired = [o["median_s"] / m["median_s"]
                          for m, o in zip(pooled[(net, "mxcc", b, t)], pooled[(net, "onnxruntime", b, t)])]
                mean = {e: min(x["mean_s"] for x in pooled[(net, e, b, t)]) for e in ("mxcc", "onnxruntime")}
                rows.append({"net": net, "batch": b, "threads": t, "mxcc_ms": best["mxcc"] * 1e3,
                             "ort_ms": best["onnxruntime"] * 1e3, "ratio": best["onnxruntime"] / best["mxcc"],
                             "paired_ratio": statistics.median(paired),
                             "mean_ratio": mean["onnxruntime"] / mean["mxcc"],
                             "mxcc_speedup": one["mxcc"] / best["mxcc"],
                             "ort_speedup": one["onnxruntime"] / best["onnxruntime"]})
    harness.print_table(rows, [("net", "net"), ("batch", "batch"), ("thr", "threads"), ("mxcc ms", "mxcc_ms"),
                               ("ORT ms", "ort_ms"), ("ORT/mxcc", "ratio"), ("paired", "paired_ratio"),
                               ("by mean", "mean_ratio"),
                               (f"mxcc x vs {threads[0]} thr", "mxcc_speedup"),
                               (f"ORT x vs {threads[0]} thr", "ort_speedup")])
    harness.append_jsonl(args.json, [dict(r, bench="scaling", cpu=harness.cpu_info()["model"], busy=args.busy,
                                          cpu_shares=shares, cross_core=[cross, after],
                                          onnxruntime=onnxruntime.__version__) for r in rows])


if __name__ == "__main__":
    main()
