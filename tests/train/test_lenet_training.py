"""LeNet learns MNIST: a short run through Python (fit) and through the standalone `lenet_train` program, and
a sanitizer build of a LeNet with BatchNorm and Dropout running training steps.

The short recipe: 2 epochs on the first 2,000 images of examples/data/mnist (batch 100, SGD lr 0.1,
momentum 0.9, wd 1e-4, Xavier), validated on images 9,000-9,999. Measured: 92.0% (Python) and 84.5% (the C
program, which initializes and shuffles with its own generator); thresholds 85% and 80%.
One thread: the timing of OpenMP barriers on a busy 2-core machine is not what these tests are about.
(examples/train_mnist.py, the full 10-epoch recipe on 8,000 images, reaches 97.9%.)
"""
import os
import re
import subprocess

import numpy as np

import mxcc
from mxcc import sym
from mxcc.initializer import Xavier, init_params
from mxcc.io import MNISTIter
from mxcc.model import fit
from mxcc.optimizer import SGD
from mxcc_testing import ROOT, needs_gcc

pytestmark = needs_gcc
MNIST = ROOT / "examples" / "data" / "mnist"
IMAGES, LABELS = MNIST / "t10k-images-idx3-ubyte.gz", MNIST / "t10k-labels-idx1-ubyte.gz"
BATCH = 100


def lenet(bn_dropout: bool = False):
    """The LeNet of examples/train_mnist.py; bn_dropout adds BatchNorm, a depthwise convolution and Dropout
    (every training kernel of the CNN operators, for the sanitizer run)."""
    x, label = sym.Variable("X"), sym.Variable("label")
    h = sym.Convolution(x, kernel=(5, 5), num_filter=20, name="conv1")
    if bn_dropout:
        h = sym.BatchNorm(h, fix_gamma=False, name="bn1")
    h = sym.Pooling(sym.Activation(h, act_type="relu"), pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool1")
    if bn_dropout:
        h = sym.Convolution(h, kernel=(3, 3), pad=(1, 1), num_group=20, num_filter=20, name="dw")
    h = sym.Activation(sym.Convolution(h, kernel=(5, 5), num_filter=50, name="conv2"), act_type="relu")
    h = sym.Pooling(h, pool_type="avg" if bn_dropout else "max", kernel=(2, 2), stride=(2, 2), name="pool2")
    h = sym.Activation(sym.FullyConnected(sym.Flatten(h), num_hidden=500, name="fc1"), act_type="relu")
    if bn_dropout:
        h = sym.Dropout(h, p=0.3, name="drop")
    return sym.SoftmaxOutput(sym.FullyConnected(h, num_hidden=10, name="fc2"), label, name="softmax")


def _optimizer():
    return SGD(learning_rate=0.1, momentum=0.9, wd=1e-4, rescale_grad=1.0 / BATCH)


def test_lenet_learns_in_python(tmp_path):
    net, shape = lenet(), (BATCH, 1, 28, 28)
    exe = mxcc.compile(net, {"X": shape}, train=True, optimizer=_optimizer(), threads=1, out_dir=tmp_path / "py")
    arg, _ = init_params(net, {"X": shape}, Xavier(), seed=1)
    exe.set_params(arg)
    train = MNISTIter(IMAGES, LABELS, BATCH, shuffle=True, end=2000, data_name="X", label_name="label")
    val = MNISTIter(IMAGES, LABELS, BATCH, shuffle=False, start=9000, data_name="X", label_name="label")
    history = fit(exe, train, val, num_epoch=2, log=lambda line: None)
    assert history[-1][2] >= 0.85, history
    assert history[-1][2] > history[0][2]


def test_lenet_train_program_learns(tmp_path):
    out = tmp_path / "c"
    mxcc.compile(lenet(), {"X": (BATCH, 1, 28, 28)}, train=True, optimizer=_optimizer(), out_dir=out, name="lenet")
    r = subprocess.run([str(out / "lenet_train"), "--images", str(IMAGES), "--labels", str(LABELS), "--epochs", "2",
                        "--train", "2000", "--val", "1000", "--lr", "0.1", "--momentum", "0.9", "--wd", "1e-4",
                        "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    acc = [float(a) for a in re.findall(r"Accuracy: ([0-9.]+)", r.stdout)]
    assert len(acc) == 2 and acc[-1] >= 0.80, r.stdout


def test_lenet_with_batchnorm_and_dropout_training_under_sanitizers(tmp_path):
    """AddressSanitizer + UBSan on training steps (train BatchNorm and its backward with the moving-stat
    update, Dropout masks, depthwise and im2col convolution backward, max/avg pooling backward) and the
    inference forward the program validates with."""
    out = mxcc.compile(lenet(bn_dropout=True), {"X": (20, 1, 28, 28)}, train=True, optimizer=_optimizer(),
                       sanitize=True, out_dir=tmp_path / "san", name="lenet_bn")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    r = subprocess.run([str(out / "lenet_bn_train"), "--images", str(IMAGES), "--labels", str(LABELS), "--epochs", "1",
                        "--train", "60", "--val", "40", "--threads", "2"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, \
        r.stdout + r.stderr
    assert r.stdout.startswith("Epoch: 0")
    assert np.isfinite(float(re.findall(r"Accuracy: ([0-9.]+)", r.stdout)[0]))
