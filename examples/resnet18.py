"""Compile an exported Gluon model-zoo network (symbol JSON + .params), run it, print the top-5 and latency.

    python examples/resnet18.py                        # ResNet-18 v1 (slim) with the weights MXNet exported
    python examples/resnet18.py --full                 # the real ResNet-18 v1 graph, random weights
    python examples/resnet18.py --symbol X-symbol.json --params X-0000.params [--batch 1] [--threads N]

The default files are the MXNet 1.9.1 exports of tests/data/models/resnet18_v1_slim (a ResNet-18 v1 graph
with fewer channels, same ops and attributes). No image data ships with mxcc, so the input is a fixed
random image: the top-5 classes only show that the network runs end to end (they are compared with
MXNet's output on the bundled reference input when the default files are used).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import mxcc

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "models"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--symbol")
    ap.add_argument("--params")
    ap.add_argument("--full", action="store_true", help="ResNet-18 v1 at full width, random weights")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    name = "resnet18_v1" if args.full else "resnet18_v1_slim"
    symbol = args.symbol or DATA / name / f"{name}-symbol.json"
    params = args.params or (None if args.full else DATA / name / f"{name}-0000.params")
    shape = (args.batch, 3, 224, 224)
    t = time.perf_counter()
    mod = mxcc.compile(symbol, {"data": shape}, name="resnet18", out_dir="build/resnet18", threads=args.threads)
    print(f"compiled {symbol} in {time.perf_counter() - t:.2f} s: {mod}")
    if params is None:
        from mxcc.initializer import Xavier, init_params
        arg, aux = init_params(mxcc.sym.load(str(symbol)), {"data": shape}, Xavier(), seed=0)
        params = {**arg, **{f"aux:{k}": v for k, v in aux.items()}}
    mod.set_params(params)
    reference = DATA / name / f"{name}-io.npz"
    if not args.symbol and reference.exists() and args.batch == np.load(reference)["input"].shape[0]:
        x = np.load(reference)["input"]
    else:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out = mod.forward(data=x)[0]
    times = []
    for _ in range(args.iters):
        t = time.perf_counter()
        mod.forward(data=x)
        times.append(time.perf_counter() - t)
    for n in range(min(args.batch, 2)):
        top = np.argsort(out[n])[::-1][:5]
        print(f"image {n}: top-5 classes {top.tolist()}, scores {np.round(out[n][top], 4).tolist()}")
    if not args.symbol and reference.exists() and x is not None and out.shape == np.load(reference)["output"].shape:
        ref = np.load(reference)["output"]
        print(f"max |mxcc - MXNet| / max |MXNet| = {np.abs(out - ref).max() / np.abs(ref).max():.2e}")
    print(f"latency: median {np.median(times) * 1e3:.2f} ms, min {min(times) * 1e3:.2f} ms per batch of {args.batch}")
    print("standalone: build/resnet18/resnet18_bench --iters 20   (mxcc perf build/resnet18 for a per-layer profile)")


if __name__ == "__main__":
    main()
