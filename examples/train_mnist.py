"""Train MXNet's C++ example MLP (and LeNet) on MNIST with the whole training step compiled to C.

    python examples/train_mnist.py [--net mlp|lenet|both] [--epochs 10] [--threads N]

The recipe of cpp-package/example/mlp_cpu.cpp: batch 100, SGD lr 0.1, wd 1e-2 (every parameter, biases
included, as the C++ package's optimizer does), rescale_grad 1/100, 10 epochs; Xavier initialization (with
the example's Uniform(0.01) MXNet itself does not learn in 10 epochs on this data). The data is the MNIST
test set shipped in examples/data/mnist: the first 8,000 images train, the last 2,000 validate. Each epoch
prints the C++ example's line: "Epoch: N X samples/sec Accuracy: Y".
"""
from __future__ import annotations

import argparse
from pathlib import Path

import mxcc
from mxcc import sym
from mxcc.initializer import Xavier, init_params
from mxcc.io import MNISTIter
from mxcc.model import fit, save_checkpoint
from mxcc.optimizer import SGD

MNIST = Path(__file__).resolve().parent / "data" / "mnist"
BATCH = 100


def mlp():
    data, label = sym.Variable("X"), sym.Variable("label")
    with sym.NameManager():
        h = sym.Activation(sym.FullyConnected(data, num_hidden=128), act_type="relu")
        h = sym.Activation(sym.FullyConnected(h, num_hidden=64), act_type="relu")
        return sym.SoftmaxOutput(sym.FullyConnected(h, num_hidden=10), label)


def lenet():
    """The LeNet of MXNet's profiler tutorial (conv 20-50, 5x5, max-pool 2x2, FC 500, FC 10)."""
    data, label = sym.Variable("X"), sym.Variable("label")
    c1 = sym.Activation(sym.Convolution(data, kernel=(5, 5), num_filter=20, name="conv1"), act_type="relu", name="relu1")
    p1 = sym.Pooling(c1, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool1")
    c2 = sym.Activation(sym.Convolution(p1, kernel=(5, 5), num_filter=50, name="conv2"), act_type="relu", name="relu2")
    p2 = sym.Pooling(c2, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool2")
    f1 = sym.Activation(sym.FullyConnected(sym.Flatten(p2), num_hidden=500, name="fc1"), act_type="relu", name="relu3")
    return sym.SoftmaxOutput(sym.FullyConnected(f1, num_hidden=10, name="fc2"), label, name="softmax")


def train(name: str, net, flat: bool, epochs: int, threads: int | None) -> float:
    shape = (BATCH, 784) if flat else (BATCH, 1, 28, 28)
    images, labels = MNIST / "t10k-images-idx3-ubyte.gz", MNIST / "t10k-labels-idx1-ubyte.gz"
    train_iter = MNISTIter(images, labels, BATCH, shuffle=True, flat=flat, end=8000, data_name="X", label_name="label")
    val_iter = MNISTIter(images, labels, BATCH, shuffle=False, flat=flat, start=8000, data_name="X", label_name="label")
    opt = SGD(learning_rate=0.1, wd=1e-2, rescale_grad=1.0 / BATCH)
    exe = mxcc.compile(net, {"X": shape}, train=True, optimizer=opt, name=name, out_dir=f"build/train_{name}",
                       threads=threads)
    arg, aux = init_params(net, {"X": shape}, Xavier(), seed=1)
    exe.set_params({**arg, **{f"aux:{k}": v for k, v in aux.items()}})
    print(f"== {name}: {exe}")
    history = fit(exe, train_iter, val_iter, num_epoch=epochs, eval_metric="acc")
    save_checkpoint(f"build/train_{name}/{name}", epochs, net, exe.arg_dict, exe.aux_dict)
    print(f"   validation accuracy {history[-1][2]:.4f}; checkpoint build/train_{name}/{name}-{epochs:04d}.params; "
          f"the same training as a C program: build/train_{name}/{name}_train --images {images} --labels {labels}")
    return history[-1][2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", choices=["mlp", "lenet", "both"], default="both")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.net in ("mlp", "both"):
        train("mlp", mlp(), True, args.epochs, args.threads)
    if args.net in ("lenet", "both"):
        train("lenet", lenet(), False, args.epochs, args.threads)


if __name__ == "__main__":
    main()
