"""MXNet's profiler tutorial (https://mxnet.apache.org/.../profiler.html), step for step, on mxcc.

    python examples/profile_lenet.py [--batch 64] [--out build/profile_lenet]

1. build the tutorial's LeNet with the Symbol API, 2. configure the profiler (`profile_all`,
`aggregate_stats`, a file name), 3. start it, run a few training steps (forward, backward, update) and an
inference forward, 4. stop it, 5. print `dumps()` (MXNet's table: per layer, per op type, arena memory)
and `dump()` a Chrome trace to open in https://ui.perfetto.dev or chrome://tracing. Unlike MXNet's, the
trace has one slice per fused layer per phase, named after the layer (`conv1+relu1`), and the file is valid
JSON after every dump.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import mxcc
from mxcc import profiler
from mxcc.initializer import Xavier, init_params
from mxcc.io import MNISTIter
from mxcc.optimizer import SGD

sys_path = Path(__file__).resolve().parent
MNIST = sys_path / "data" / "mnist"


def lenet():
    from mxcc import sym
    data, label = sym.Variable("data"), sym.Variable("softmax_label")
    c1 = sym.Activation(sym.Convolution(data, kernel=(5, 5), num_filter=20, name="conv1"), act_type="relu", name="relu1")
    p1 = sym.Pooling(c1, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool1")
    c2 = sym.Activation(sym.Convolution(p1, kernel=(5, 5), num_filter=50, name="conv2"), act_type="relu", name="relu2")
    p2 = sym.Pooling(c2, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool2")
    f1 = sym.Activation(sym.FullyConnected(sym.Flatten(p2), num_hidden=500, name="fc1"), act_type="relu", name="relu3")
    return sym.SoftmaxOutput(sym.FullyConnected(f1, num_hidden=10, name="fc2"), label, name="softmax")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default="build/profile_lenet")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    net = lenet()
    shape = (args.batch, 1, 28, 28)
    exe = mxcc.compile(net, {"data": shape}, train=True, name="lenet", out_dir=args.out,
                       optimizer=SGD(learning_rate=0.1, rescale_grad=1.0 / args.batch))
    arg, aux = init_params(net, {"data": shape}, Xavier(), seed=0)
    exe.set_params({**arg, **{f"aux:{k}": v for k, v in aux.items()}})
    it = MNISTIter(MNIST / "t10k-images-idx3-ubyte.gz", MNIST / "t10k-labels-idx1-ubyte.gz", args.batch,
                   end=args.batch * args.steps)

    trace = str(Path(args.out) / "profile_lenet.json")
    profiler.set_config(profile_all=True, aggregate_stats=True, continuous_dump=False, filename=trace)
    profiler.set_state("run")
    for batch in it:                                    # the tutorial: forward + backward (+ update)
        exe.forward(is_train=True, data=batch.data[0], softmax_label=batch.label[0])
        exe.backward()
        exe.update()
    exe.forward(is_train=False, data=batch.data[0], softmax_label=batch.label[0])
    profiler.set_state("stop")
    print(profiler.dumps())
    profiler.dump()
    print(f"Chrome trace: {trace} (open it in https://ui.perfetto.dev)")


if __name__ == "__main__":
    main()
