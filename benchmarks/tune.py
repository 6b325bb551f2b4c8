"""Tuned vs untuned builds: what `mxcc compile --tune` (mxcc/compiler/tune.py) changes, and what it gains.

    python benchmarks/tune.py [--nets resnet18_v1,mobilenet1.0,squeezenet1.1] [--batch 1] [--threads 2]
                              [--rounds 5] [--seconds 1.0] [--json out.jsonl]

Each network (tests/data/models, weights as `mxcc compile --random-params` gives them: benchmarks/cnn.py) is
compiled twice at the batch given: with the heuristics of mxcc/ops/convolution.py (path) and tuned for the
thread count given (`tune=True, tune_threads=T`: each layer's candidates timed on this machine, or read from
$MXCC_CACHE_DIR/tune where an earlier run measured them). The script prints each layer whose path changed, with
the times the tuner measured for the heuristic's path and the chosen one, checks that both builds give the same
output (max|tuned - untuned| <= 2e-5 max|untuned|: Winograd's rounding), then times both builds' standalone
`<net>_bench` (T threads, `--seconds S` after 3 warm-up forwards, a fresh process each), alternating the two
builds for `--rounds` rounds so that both see the same noise of a shared machine. Reported: the median over
rounds of each build's mean time per forward, and heuristic / tuned (> 1: the tuned build is faster), with the
rounds the tuned build won.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
from cnn import _standalone, input_name, network_params, symbol_json  # noqa: E402

TOLERANCE = 2e-5


def compare(net: str, batch: int, threads: int, rounds: int, seconds: float, root: Path) -> dict:
    import mxcc
    shape = (batch, 3, 224, 224)
    data = input_name(net)
    params = network_params(net, shape)
    dirs = {"heuristic": root / f"{net}-heuristic", "tuned": root / f"{net}-tuned"}
    t0 = time.perf_counter()
    base = mxcc.compile(symbol_json(net), {data: shape}, params, out_dir=dirs["heuristic"], name=net.replace(".", "_"))
    t1 = time.perf_counter()
    tuned = mxcc.compile(symbol_json(net), {data: shape}, params, out_dir=dirs["tuned"], name=net.replace(".", "_"),
                         tune=True, tune_threads=threads)
    t2 = time.perf_counter()
    t = tuned.tuning
    print(f"\n{net}, batch {batch}: {len(t['layers'])} tunable convolutions, tuned for {t['threads']} threads "
          f"({t['engine']}): {t['measured']} measured now, {len(t['layers']) - t['measured']} from the cache, "
          f"tuning {t['seconds']:.2f} s (compile: heuristic {t1 - t0:.1f} s, tuned {t2 - t1:.1f} s)")
    changed = [l for l in t["layers"] if l["chosen"] != l["heuristic"]]
    rows = [dict(layer=l["node"], heuristic=l["heuristic"], h_us=f"{l['times_us'][l['heuristic']]:.1f}",
                 chosen=l["chosen"], c_us=f"{l['times_us'][l['chosen']]:.1f}",
                 gain=f"{l['times_us'][l['heuristic']] / l['times_us'][l['chosen']]:.2f}") for l in changed]
    if rows:
        harness.print_table(rows, [("layer", "layer"), ("heuristic", "heuristic"), ("its us", "h_us"),
                                   ("tuned", "chosen"), ("its us", "c_us"), ("heur/tuned", "gain")])
    else:
        print("no layer changed: every heuristic choice was within 5% of the fastest candidate")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ref = base.forward(**{data: x})[0]
    err = float(np.max(np.abs(tuned.forward(**{data: x})[0] - ref))) / float(np.max(np.abs(ref)))
    print(f"outputs: max|tuned - heuristic| / max|heuristic| = {err:.2e} "
          f"({'ok' if err <= TOLERANCE else 'ABOVE ' + str(TOLERANCE)})")
    bench = base.meta["bench"]
    samples = {"heuristic": [], "tuned": []}
    for _ in range(rounds):
        for kind in samples:
            samples[kind].append(_standalone(dirs[kind], bench, threads, seconds, 0))
    med = {k: statistics.median(v) for k, v in samples.items()}
    won = sum(1 for h, u in zip(samples["heuristic"], samples["tuned"]) if u < h)
    print(f"time per forward, {threads} threads, median of {rounds} alternating rounds: heuristic "
          f"{med['heuristic'] * 1e3:.3f} ms, tuned {med['tuned'] * 1e3:.3f} ms, heuristic/tuned "
          f"{med['heuristic'] / med['tuned']:.3f} (tuned faster in {won} of {rounds} rounds)")
    print("  rounds (ms): " + "; ".join(f"{h * 1e3:.2f} / {u * 1e3:.2f}" for h, u in zip(samples["heuristic"],
                                                                                          samples["tuned"])))
    return dict(bench="tune", net=net, batch=batch, threads=threads, engine=t["engine"], layers=len(t["layers"]),
                changed=[dict(node=l["node"], heuristic=l["heuristic"], chosen=l["chosen"], times_us=l["times_us"])
                         for l in changed], measured=t["measured"], tuning_s=t["seconds"], max_rel_err=err,
                heuristic_s=samples["heuristic"], tuned_s=samples["tuned"],
                ratio=med["heuristic"] / med["tuned"], tuned_won=won)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nets", default="resnet18_v1,mobilenet1.0,squeezenet1.1")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0, help="timed seconds per build and round")
    p.add_argument("--json", metavar="PATH", help="append one JSON line per network to PATH")
    args = p.parse_args()
    cpu = harness.cpu_info()
    print(f"{cpu['model']} ({cpu['cores']} cores), {time.strftime('%Y-%m-%d %H:%M %Z')}; batch {args.batch}, "
          f"{args.threads} threads, {args.rounds} rounds of {args.seconds} s per build")
    records = []
    with tempfile.TemporaryDirectory(prefix="mxcc-tune-bench-") as tmp:
        for net in args.nets.split(","):
            records.append(compare(net, args.batch, args.threads, args.rounds, args.seconds, Path(tmp)))
    harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
