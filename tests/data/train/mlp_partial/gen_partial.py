"""MXNet 1.9.1 reference for a partial last batch: the cpp-package MLP (tests/data/train/mlp) trained by SGD
on MNIST test rows 0-249 in batches of 100, 100 and 50. The executor is bound for 100; the last batch runs on
`ex.reshape(X=(50, 784), label=(50,))`, which shares the weights and gradients, as MXNet's Module does for a
smaller batch. SGD(learning_rate=0.1, wd=1e-4, rescale_grad=1/100, momentum=0) through get_updater, the same
rescale_grad for every batch (the user's: MXNet does not change it for a short batch).

    /path/to/mxnet-venv/bin/python gen_partial.py      # writes mlp-partial.npz beside this file

mlp-partial.npz: step2_out (the partial batch's forward, 50 x 10), step2_grad:<p> for the small parameters
(raw, before rescale_grad), and weight:<p> for every parameter after the three steps.
"""
import os

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MLP = os.path.join(HERE, "..", "mlp")
LR, WD, BATCH = 0.1, 1e-4, 100
SIZES = (100, 100, 50)

sym = mx.sym.load(os.path.join(MLP, "mlp-symbol.json"))
init = {k.split(":", 1)[1]: v for k, v in mx.nd.load(os.path.join(MLP, "mlp-init-0000.params")).items()}
trace = np.load(os.path.join(MLP, "mlp-trace.npz"))
X, Y = trace["data"][:sum(SIZES)], trace["label"][:sum(SIZES)]
pnames = [n for n in sym.list_arguments() if n not in ("X", "label")]
grad_req = {n: ("null" if n in ("X", "label") else "write") for n in sym.list_arguments()}
ex = sym.simple_bind(mx.cpu(), grad_req=grad_req, X=(BATCH, 784), label=(BATCH,))
for n in pnames:
    ex.arg_dict[n][:] = init[n]
updater = mx.optimizer.get_updater(mx.optimizer.SGD(learning_rate=LR, wd=WD, rescale_grad=1.0 / BATCH))
out = {}
start = 0
for t, size in enumerate(SIZES):
    e = ex if size == BATCH else ex.reshape(X=(size, 784), label=(size,))
    e.arg_dict["X"][:] = X[start:start + size]
    e.arg_dict["label"][:] = Y[start:start + size]
    o = e.forward(is_train=True)[0].asnumpy()
    e.backward()
    for i, n in enumerate(pnames):
        if t == len(SIZES) - 1:
            if n != "w0":
                out["step2_grad:" + n] = e.grad_dict[n].asnumpy().copy()
        updater(i, e.grad_dict[n], e.arg_dict[n])
    mx.nd.waitall()
    start += size
out["step2_out"] = o
for n in pnames:
    out["weight:" + n] = ex.arg_dict[n].asnumpy()
np.savez_compressed(os.path.join(HERE, "mlp-partial.npz"), **out)
print({k: v.shape for k, v in out.items()})
