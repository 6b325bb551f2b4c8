"""The quick start: train MXNet's C++ example MLP in compiled C on MNIST, then compile it for inference and test it.

    python examples/mnist_mlp.py [--epochs 10] [--threads N]

The network is cpp-package/example/mlp_cpu.cpp's (784 -> FC128 -> relu -> FC64 -> relu -> FC10 -> SoftmaxOutput),
built with mxcc.sym. Only MNIST's 10,000 test images ship with mxcc (examples/data/mnist), so they are split:
images 0-7,999 train, images 8,000-9,999 are held out and never seen in training; the accuracy printed at the
end is on those 2,000. Training is the C++ example's recipe (batch 100, SGD lr 0.1, wd 1e-2, Xavier init) with
the whole step (forward, backward, update) compiled to C; each epoch prints the C++ example's line. The trained
weights are then compiled again for inference (batch 100) and checked against a numpy forward.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import mxcc
from mxcc import sym
from mxcc.initializer import Xavier, init_params
from mxcc.io import MNISTIter
from mxcc.model import fit
from mxcc.optimizer import SGD

HERE = Path(__file__).resolve().parent
MNIST = HERE / "data" / "mnist"
BATCH, TRAIN = 100, 8000          # images [0, TRAIN) train, [TRAIN, 10000) are the held-out test set


def mlp() -> mxcc.sym.Symbol:
    """784 -> FC128 -> relu -> FC64 -> relu -> FC10 -> SoftmaxOutput, as in mlp_cpu.cpp (MXNet's auto names:
    fullyconnected0_weight, ..., which the initializer recognizes)."""
    x, label = sym.Variable("X"), sym.Variable("label")
    h = x
    with sym.NameManager():
        for i, n in enumerate((128, 64, 10)):
            h = sym.FullyConnected(h, num_hidden=n)
            if i < 2:
                h = sym.Activation(h, act_type="relu")
        return sym.SoftmaxOutput(h, label)


def numpy_forward(p: dict, x: np.ndarray) -> np.ndarray:
    """The same network in float64 numpy (an independent check of the compiled inference)."""
    h = x.astype(np.float64)
    for i in range(3):
        h = h @ p[f"fullyconnected{i}_weight"].T.astype(np.float64) + p[f"fullyconnected{i}_bias"]
        if i < 2:
            h = np.maximum(h, 0)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    images, labels = MNIST / "t10k-images-idx3-ubyte.gz", MNIST / "t10k-labels-idx1-ubyte.gz"
    net = mlp()
    shape = {"X": (BATCH, 784)}

    # 1. training, compiled: forward + backward + SGD update of every parameter in one C call per batch
    t = time.perf_counter()
    exe = mxcc.compile(net, shape, train=True, optimizer=SGD(learning_rate=0.1, wd=1e-2, rescale_grad=1.0 / BATCH),
                       name="mlp", out_dir="build/mnist_mlp_train", threads=args.threads)
    print(f"compiled the training step in {time.perf_counter() - t:.2f} s "
          f"({'from the cache' if exe.cached else 'cold'}): {exe}")
    arg, aux = init_params(net, shape, Xavier(), seed=1)
    exe.set_params({**arg, **{f"aux:{k}": v for k, v in aux.items()}})
    train = MNISTIter(images, labels, BATCH, shuffle=True, flat=True, end=TRAIN, data_name="X", label_name="label")
    held_out = MNISTIter(images, labels, BATCH, shuffle=False, flat=True, start=TRAIN, data_name="X",
                         label_name="label")
    print(f"training on MNIST test images 0-{TRAIN - 1}, {args.epochs} epochs; images {TRAIN}-9999 are held out")
    fit(exe, train, held_out, num_epoch=args.epochs, eval_metric="acc")

    # 2. the trained weights, compiled for inference, on the held-out images
    params = {k: v for k, v in exe.arg_dict.items() if k not in ("X", "label")}
    t = time.perf_counter()
    mod = mxcc.compile(net, shape, params, name="mlp", out_dir="build/mnist_mlp", threads=args.threads)
    print(f"compiled for inference in {time.perf_counter() - t:.2f} s: {mod} -> build/mnist_mlp/")
    x = np.concatenate([b.data[0] for b in _batches(held_out)])
    y = np.concatenate([b.label[0] for b in _batches(held_out)]).astype(np.int64)
    probs = np.empty((len(x), 10), np.float32)
    mod.forward(X=x[:BATCH])                              # warm-up
    t = time.perf_counter()
    for i in range(0, len(x), BATCH):
        probs[i: i + BATCH] = mod.forward(X=x[i: i + BATCH])[0]
    dt = time.perf_counter() - t
    accuracy = float((probs.argmax(1) == y).mean())
    err = float(np.abs(probs - numpy_forward(params, x)).max())
    print(f"test accuracy: {accuracy:.2%} on the {len(x)} held-out images "
          f"({len(x) / dt:,.0f} images/s in batches of {BATCH}; max |mxcc - numpy| = {err:.1e})")
    print("next:\n"
          "  mxcc inspect examples/data/mlp/mlp-symbol.json --shape X=100,784   # what the compiler decided\n"
          "  build/mnist_mlp/mlp_bench --iters 1000                              # the C alone, no Python\n"
          "  mxcc perf build/mnist_mlp --seconds 2                               # perf: time per layer, flame graph\n"
          "  build/mnist_mlp_train/mlp_train --images examples/data/mnist/t10k-images-idx3-ubyte.gz \\\n"
          "      --labels examples/data/mnist/t10k-labels-idx1-ubyte.gz        # the same training without Python\n"
          "  python examples/profile_lenet.py                                    # MXNet's profiler API: table + trace")
    if err > 1e-5 or accuracy < 0.9:
        raise SystemExit("the compiled network does not match numpy, or did not learn")


def _batches(it):
    it.reset()
    return list(it)


if __name__ == "__main__":
    main()
