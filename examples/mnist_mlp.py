"""Build the MLP of MXNet's C++ example with mxcc.sym, compile it to C, and run the MNIST test set through it.

    python examples/mnist_mlp.py [--batch 100] [--threads N]

The weights are the ones MXNet 1.9.1 exported for this network (examples/data/mlp, untrained), so the
result is checked against an independent numpy forward of the same weights rather than against labels.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import mxcc
from mxcc import sym
from mxcc.train.idx import load_mnist
from mxcc.params import load_params, split_arg_aux

HERE = Path(__file__).resolve().parent


def mlp() -> mxcc.sym.Symbol:
    """784 -> FC128 -> relu -> FC64 -> relu -> FC10 -> SoftmaxOutput, named as in mlp_cpu.cpp."""
    x, label = sym.Variable("X"), sym.Variable("label")
    h = x
    with sym.NameManager():
        for i, n in enumerate((128, 64, 10)):
            h = sym.FullyConnected(h, sym.Variable(f"w{i}"), sym.Variable(f"b{i}"), num_hidden=n)
            if i < 2:
                h = sym.Activation(h, act_type="relu")
        return sym.SoftmaxOutput(h, label)


def numpy_forward(p: dict, x: np.ndarray) -> np.ndarray:
    h = x.astype(np.float64)
    for i in range(3):
        h = h @ p[f"w{i}"].T.astype(np.float64) + p[f"b{i}"]
        if i < 2:
            h = np.maximum(h, 0)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    images, labels = load_mnist(HERE / "data" / "mnist", "t10k")
    x = (images.reshape(len(images), 784) / 255.0).astype(np.float32)
    params, _ = split_arg_aux(load_params(HERE / "data" / "mlp" / "mlp-0000.params"))

    net = mlp()
    print("arguments:", net.list_arguments())
    print("infer_shape:", net.infer_shape(X=(args.batch, 784)))
    t = time.perf_counter()
    mod = mxcc.compile(net, {"X": (args.batch, 784)}, params, name="mlp", out_dir="build/mnist_mlp",
                       threads=args.threads)
    print(f"compiled in {time.perf_counter() - t:.2f} s ({'from the cache' if mod.cached else 'cold'}): {mod}")

    n = len(x) // args.batch * args.batch
    probs = np.empty((n, 10), np.float32)
    mod.forward(X=x[: args.batch])                       # warm-up
    t = time.perf_counter()
    for i in range(0, n, args.batch):
        probs[i: i + args.batch] = mod.forward(X=x[i: i + args.batch])[0]
    dt = time.perf_counter() - t
    ref = numpy_forward(params, x[:n])
    err = np.abs(probs - ref).max()
    agree = (probs.argmax(1) == ref.argmax(1)).mean()
    print(f"ran {n} MNIST test images in batches of {args.batch}: {dt * 1e6 / (n // args.batch):.1f} us per batch, "
          f"{n / dt:,.0f} images/s")
    print(f"max |mxcc - numpy| = {err:.2e}, same predicted class for {agree:.2%} of images")
    print(f"class histogram of the (untrained) predictions: {np.bincount(probs.argmax(1), minlength=10)}")
    print(f"standalone benchmark: build/mnist_mlp/mlp_bench --iters 1000")
    if err > 1e-5:
        raise SystemExit("mismatch against the numpy reference")


if __name__ == "__main__":
    main()
