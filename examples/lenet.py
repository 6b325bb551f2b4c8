"""The LeNet of MXNet's profiler tutorial, written with mxcc.sym exactly as in MXNet, compiled and run on MNIST.

    python examples/lenet.py [--batch 64] [--threads N]

The weights are the ones MXNet 1.9.1 exported for this network (tests/data/models/lenet; initialised, not
trained: `python examples/train_mnist.py --net lenet` trains it to ~97.9%). The network built here is
checked against MXNet's own JSON (same nodes and attributes) and its output against MXNet's.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import mxcc
from mxcc import sym
from mxcc.train.idx import load_mnist

HERE = Path(__file__).resolve().parent
REF = HERE.parent / "tests" / "data" / "models" / "lenet"


def lenet():
    data = sym.Variable("data")
    conv1 = sym.Convolution(data=data, kernel=(5, 5), num_filter=20, name="conv1")
    relu1 = sym.Activation(data=conv1, act_type="relu", name="relu1")
    pool1 = sym.Pooling(data=relu1, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool1")
    conv2 = sym.Convolution(data=pool1, kernel=(5, 5), num_filter=50, name="conv2")
    relu2 = sym.Activation(data=conv2, act_type="relu", name="relu2")
    pool2 = sym.Pooling(data=relu2, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool2")
    flatten = sym.Flatten(data=pool2, name="flatten")
    fc1 = sym.FullyConnected(data=flatten, num_hidden=512, name="fc1")
    relu3 = sym.Activation(data=fc1, act_type="relu", name="relu3")
    fc2 = sym.FullyConnected(data=relu3, num_hidden=10, name="fc2")
    return sym.SoftmaxOutput(data=fc2, name="softmax")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    net = lenet()
    mine = [(n["op"], n["name"]) for n in json.loads(net.tojson())["nodes"]]
    theirs = [(n["op"], n["name"]) for n in json.loads((REF / "lenet-symbol.json").read_text())["nodes"]]
    print("same graph as MXNet's export:", mine == theirs)
    mod = mxcc.compile(net, {"data": (args.batch, 1, 28, 28)}, REF / "lenet-0000.params", name="lenet",
                       out_dir="build/lenet", threads=args.threads)
    print(mod)
    io = np.load(REF / "lenet-io.npz")
    ref_mod = mxcc.compile(net, {"data": io["input"].shape}, REF / "lenet-0000.params", name="lenet")
    out = ref_mod.forward(data=io["input"])[0]
    print(f"max |mxcc - MXNet| / max |MXNet| on MXNet's input: {np.abs(out - io['output']).max() / np.abs(io['output']).max():.2e}")
    images, labels = load_mnist(HERE / "data" / "mnist", "t10k")
    x = (images.astype(np.float32) / 256.0).reshape(-1, 1, 28, 28)
    n = len(x) // args.batch * args.batch
    t = time.perf_counter()
    preds = np.concatenate([mod.forward(data=x[i:i + args.batch])[0].argmax(1) for i in range(0, n, args.batch)])
    dt = time.perf_counter() - t
    print(f"{n} MNIST images in {dt:.2f} s ({n / dt:,.0f} images/s, batch {args.batch}); "
          f"accuracy of the untrained weights: {(preds == labels[:n]).mean():.3f}")


if __name__ == "__main__":
    main()
