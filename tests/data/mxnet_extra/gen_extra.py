"""Extra reference cases made by the real Apache MXNet 1.9.1 (numpy 1.23.5, CPU pip build): repeated graph
outputs and SoftmaxActivation on 1-D to 4-D data. Layout and protocol as shared/mxnet-ref/ops (gen/gen_ops.py,
adapted): for every case

  cases/<case>-symbol.json   the symbol as MXNet wrote it (Symbol.tojson(); the Gluon case: HybridBlock.export)
  cases/<case>.npz           arg:<name>       every argument fed to the executor
                             out:<i>          forward output i (order of Symbol.list_outputs())
                             head_grad:<i>    head gradient given for output i (absent for loss heads)
                             grad:<name>      the reference gradient of every argument with grad_req 'write'
  and manifest.json, one record per case ("outputs" is a list: a repeated output is listed twice), and
  mxnet_ops.json: the names of every operator MXNet 1.9.1 registers (mx.operator.get_all_registered_operators()).

Protocol: ex = sym.simple_bind(mx.cpu(), grad_req=..., **shapes); set args; outs = ex.forward(is_train=True);
ex.backward(out_grads=[head_grad:<i>...]) (loss heads: ex.backward()).

Where MXNet 1.9.1 does not compute the derivative of its own forward, `grad:<name>` is the true gradient
(made by MXNet from an equivalent graph, stated in the case's `grad_reference`) and MXNet's own result of the
protocol is kept as `mxnet_grad:<name>`:
  - repeated outputs: the symbolic executor keeps only the LAST repeat's head gradient (nnvm's Gradient pass
    assigns `output_grads[y].grads = {ys_out_grad[i]}` per head, so a later repeat overwrites an earlier
    one); so does imperative autograd on a plain Gluon block, while a hybridized Gluon block (CachedOp) sums
    them. The reference is the sum: the same executor on the graph without repeats, each output's head
    gradient summed over its repeats (Gluon case: the hybridized block's autograd gradient, which sums).
  - SoftmaxActivation(mode='instance') on data of 3+ dims: the forward is a softmax over the LAST axis
    (softmax_activation-inl.h: FlatTo2D), the backward reduces over axis 1 (it views every mode as
    (N, C, rest)); the reference is mx.sym.softmax(axis=-1)'s gradient for the same head gradient. 1-D data:
    MXNet's backward fails (shape_[1] out of range): forward only.
Each such case also records a float64 finite-difference check of the reference (`fd_check`).

Run with MXNet's own interpreter from the repository root (mxcc's tests never import mxnet):

    /tmp/mxvenv/bin/python tests/data/mxnet_extra/gen_extra.py
"""
import json
import os
import sys
import zlib
import logging

import numpy as np

logging.getLogger().setLevel(logging.ERROR)
os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")

import mxnet as mx  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_DIR = os.path.join(HERE, "cases")
S = mx.sym


def rng_for(name, base=0):
    return np.random.RandomState((zlib.crc32(name.encode("utf-8")) + base) % (2 ** 31))


def env_info():
    return {"mxnet_version": mx.__version__, "numpy_version": np.__version__, "python": sys.version.split()[0],
            "features_enabled": sorted(k for k, v in mx.runtime.Features().items() if v.enabled),
            "env": {k: os.environ.get(k) for k in ["OMP_NUM_THREADS", "MXNET_MKLDNN_ENABLED"]}}


def json_ops(sym_json):
    counts = {}
    for n in sym_json["nodes"]:
        if n["op"] != "null":
            counts[n["op"]] = counts.get(n["op"], 0) + 1
    return dict(sorted(counts.items()))


def run_executor(sym, args, grad_req, head_grads, loss=False):
    """simple_bind, set args, forward(is_train=True), backward: (outputs, grads) as numpy arrays."""
    ex = sym.simple_bind(mx.cpu(), grad_req=grad_req, **{k: v.shape for k, v in args.items()})
    for k, v in args.items():
        ex.arg_dict[k][:] = v
    outs = [o.asnumpy().copy() for o in ex.forward(is_train=True)]
    if head_grads is not None or loss:
        ex.backward() if loss else ex.backward(out_grads=[mx.nd.array(h) for h in head_grads])
    mx.nd.waitall()
    grads = {k: ex.grad_dict[k].asnumpy().copy() for k, r in grad_req.items() if r != "null"} \
        if head_grads is not None or loss else {}
    return outs, grads


def make_args(name, sym, shapes, values=None):
    arg_shapes, out_shapes, _ = sym.infer_shape(**shapes)
    rng = rng_for(name, 7)
    args = {}
    for nm, shp in zip(sym.list_arguments(), arg_shapes):
        f = (values or {}).get(nm)
        args[nm] = (f(rng, shp) if f else rng.normal(0, 1, size=shp)).astype(np.float32)
    return args, out_shapes


def head_grads_for(name, out_shapes):
    rng = rng_for(name, 11)
    return [rng.normal(0, 1, size=s).astype(np.float32) for s in out_shapes]


def sm64(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def fd_check(f, args, grads, name, eps=1e-4):
    """Directional derivative of the float64 scalar f(args) along a random direction vs <grad, v>."""
    rng = rng_for(name, 13)
    v = {k: rng.normal(0, 1, size=a.shape) for k, a in args.items() if k in grads}
    plus = {k: a.astype(np.float64) + eps * v[k] if k in v else a.astype(np.float64) for k, a in args.items()}
    minus = {k: a.astype(np.float64) - eps * v[k] if k in v else a.astype(np.float64) for k, a in args.items()}
    fd = (f(plus) - f(minus)) / (2 * eps)
    return {"finite_difference": float(fd), "reference": float(sum((grads[k] * v[k]).sum() for k in v))}


MANIFEST = {"generator": "tests/data/mxnet_extra/gen_extra.py", "environment": None, "protocol": __doc__,
            "cases": {}}


def save(name, sym_json, arrays, **record):
    os.makedirs(CASES_DIR, exist_ok=True)
    with open(os.path.join(CASES_DIR, name + "-symbol.json"), "w") as f:
        f.write(sym_json)
    np.savez_compressed(os.path.join(CASES_DIR, name + ".npz"),
                        **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    MANIFEST["cases"][name] = dict(ops_in_json=json_ops(json.loads(sym_json)), **record,
                                   files={"symbol": "cases/%s-symbol.json" % name, "arrays": "cases/%s.npz" % name})
    print("ok", name)


def arrays_of(args, outs, heads, grads, mxnet_grads=None):
    a = {"arg:" + k: v for k, v in args.items()}
    a.update({"out:%d" % i: o for i, o in enumerate(outs)})
    a.update({"head_grad:%d" % i: h for i, h in enumerate(heads or [])})
    a.update({"grad:" + k: g for k, g in grads.items()})
    a.update({"mxnet_grad:" + k: g for k, g in (mxnet_grads or {}).items()})
    return a


# -- repeated outputs ------------------------------------------------------------------------------------
def _fc_relu():
    fc = S.FullyConnected(S.var("data"), num_hidden=4, name="fc")
    return fc, S.Activation(fc, act_type="relu", name="relu")


def repeated(name, build, uniques, positions, note):
    """`build()` -> the symbol with repeated outputs; `uniques()` -> the same outputs without repeats;
    positions[i] = the index in uniques() of output i."""
    sym, plain = build(), uniques()
    shapes = {"data": (3, 5)}
    args, out_shapes = make_args(name, sym, shapes, {"data": lambda r, s: r.uniform(-1, 1, size=s)})
    greq = {k: "write" for k in args}
    heads = head_grads_for(name, out_shapes)
    outs, mx_grads = run_executor(sym, args, greq, heads)
    summed = [sum(h for h, p in zip(heads, positions) if p == j) for j in range(len(plain.list_outputs()))]
    plain_outs, grads = run_executor(plain, args, greq, summed)
    assert all(np.array_equal(o, plain_outs[p]) for o, p in zip(outs, positions))
    last = [heads[max(i for i, p in enumerate(positions) if p == j)] for j in range(len(summed))]
    _, last_grads = run_executor(plain, args, greq, last)
    assert all(np.array_equal(mx_grads[k], last_grads[k]) for k in grads), "MXNet no longer keeps the last only"

    def f(a):            # sum_i <head_i, out_i> in float64 (FC + relu / tanh)
        fc = a["data"] @ a["fc_weight"].T + a["fc_bias"]
        vals = {"relu": np.maximum(fc, 0), "tanh": np.tanh(fc)}
        return sum((h * vals[k]).sum() for h, k in zip(heads, [sym.list_outputs()[i].split("_")[0]
                                                                for i in range(len(heads))]))
    save(name, sym.tojson(), arrays_of(args, outs, heads, grads, mx_grads),
         outputs=sym.list_outputs(), arguments={k: list(v.shape) for k, v in args.items()}, grad_req=greq,
         loss_op=False, inputs=["data"], fd_check=fd_check(f, args, grads, name),
         grad_reference="MXNet's executor on the graph without repeats (%s), head gradients summed per output"
                        % plain.list_outputs(),
         mxnet_grad="MXNet's executor on this graph: only the last repeat's head gradient counts", note=note)


def repeated_cases():
    repeated("repeat_group_yy", lambda: S.Group([_fc_relu()[1]] * 2), lambda: _fc_relu()[1], [0, 0],
             "Group([y, y]), y = relu(FullyConnected(data))")

    def yzy():
        fc, y = _fc_relu()
        return S.Group([y, S.Activation(fc, act_type="tanh", name="tanh"), y])

    def yz():
        fc, y = _fc_relu()
        return S.Group([y, S.Activation(fc, act_type="tanh", name="tanh")])
    repeated("repeat_group_yzy", yzy, yz, [0, 1, 0], "Group([y, z, y]), y = relu(fc), z = tanh(fc)")


class _TwiceBlock(gluon.HybridBlock):
    """A Gluon block returning one value twice (`return y, y`)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.dense = gluon.nn.Dense(4, in_units=5)

    def hybrid_forward(self, F, x):
        y = F.relu(self.dense(x))
        return y, y


def gluon_case(name="repeat_gluon_xx"):
    import tempfile
    rng = rng_for(name, 7)
    x = rng.uniform(-1, 1, size=(3, 5)).astype(np.float32)
    params = {"weight": rng.normal(0, 1, size=(4, 5)).astype(np.float32),
              "bias": rng.normal(0, 1, size=(4,)).astype(np.float32)}
    heads = head_grads_for(name, [(3, 4), (3, 4)])

    def block(hybridize):
        net = _TwiceBlock(prefix="twice_")
        net.initialize()
        net.dense.weight.set_data(mx.nd.array(params["weight"]))
        net.dense.bias.set_data(mx.nd.array(params["bias"]))
        x_nd = mx.nd.array(x)
        x_nd.attach_grad()
        if hybridize:
            net.hybridize()
        with autograd.record():
            outs = net(x_nd)
        autograd.backward(list(outs), [mx.nd.array(h) for h in heads])
        grads = {"data": x_nd.grad.asnumpy(), net.dense.weight.name: net.dense.weight.grad().asnumpy(),
                 net.dense.bias.name: net.dense.bias.grad().asnumpy()}
        return net, [o.asnumpy() for o in outs], grads

    net, outs, grads = block(True)               # hybridized (CachedOp): the head gradients are summed
    _, outs_imp, grads_imp = block(False)        # plain block: the last head gradient wins
    with tempfile.TemporaryDirectory() as d:
        net.export(os.path.join(d, "twice"))
        sym_json = open(os.path.join(d, "twice-symbol.json")).read()
    sym = mx.sym.load_json(sym_json)
    args = {"data": x, net.dense.weight.name: params["weight"], net.dense.bias.name: params["bias"]}
    greq = {k: "write" for k in sym.list_arguments()}
    ex_outs, ex_grads = run_executor(sym, args, greq, heads)
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(outs + outs_imp, ex_outs * 2))
    assert all(np.allclose(grads_imp[k], ex_grads[k], atol=1e-5) for k in grads)

    def f(a):
        y = np.maximum(a["data"] @ a[net.dense.weight.name].T + a[net.dense.bias.name], 0)
        return (heads[0] * y).sum() + (heads[1] * y).sum()
    save(name, sym_json, arrays_of(args, ex_outs, heads, grads, ex_grads),
         outputs=sym.list_outputs(), arguments={k: list(v.shape) for k, v in args.items()}, grad_req=greq,
         loss_op=False, inputs=["data"], fd_check=fd_check(f, args, grads, name),
         grad_reference="the hybridized Gluon block's autograd (mx.autograd.backward with both head gradients): "
                        "the sum",
         mxnet_grad="MXNet's executor on the exported symbol (and autograd on the block not hybridized): only the "
                    "last output's head gradient counts",
         note="Gluon HybridBlock returning `y, y` (y = relu(Dense(4)(x))), exported JSON: heads [[n, 0, 0], [n, 0, 0]]")


def loss_case(name="repeat_loss_head"):
    fc = S.FullyConnected(S.var("data"), num_hidden=4, name="fc")
    so = S.SoftmaxOutput(fc, S.var("label"), name="so")
    sym = S.Group([so, so])
    args, _ = make_args(name, sym, {"data": (3, 5), "label": (3,)},
                        {"label": lambda r, s: r.randint(0, 4, size=s)})
    greq = {k: ("null" if k == "label" else "write") for k in args}
    outs, grads = run_executor(sym, args, greq, None, loss=True)
    _, single = run_executor(so, args, greq, None, loss=True)
    assert all(np.array_equal(grads[k], single[k]) for k in grads)
    save(name, sym.tojson(), arrays_of(args, outs, None, grads), outputs=sym.list_outputs(),
         arguments={k: list(v.shape) for k, v in args.items()}, grad_req=greq, loss_op=True,
         inputs=["data", "label"], grad_reference="MXNet's executor on this graph (ex.backward(), no head gradients)",
         note="Group([so, so]) of a SoftmaxOutput: backward() needs no head gradient and the loss gradient counts "
              "once (the same as the single head)")


def dropout_case(name="repeat_dropout_infer"):
    fc, y = _fc_relu()
    sym = S.Group([y, S.Dropout(y, p=0.5, name="drop")])
    args, _ = make_args(name, sym, {"data": (3, 5)})
    ex = sym.simple_bind(mx.cpu(), grad_req="null", data=(3, 5))
    for k, v in args.items():
        ex.arg_dict[k][:] = v
    outs = [o.asnumpy() for o in ex.forward(is_train=False)]
    save(name, sym.tojson(), arrays_of(args, outs, None, {}), outputs=sym.list_outputs(),
         arguments={k: list(v.shape) for k, v in args.items()}, grad_req=None, loss_op=False, inputs=["data"],
         is_train=False, note="Group([y, Dropout(y)]) at inference (forward(is_train=False)): Dropout is the identity, "
                              "so both outputs are y (mxcc's remove_dropout makes them one value)")


# -- SoftmaxActivation -----------------------------------------------------------------------------------
def softmax_activation_cases():
    for mode in ("instance", "channel"):
        for shape in ((6,), (3, 5), (2, 3, 4), (2, 3, 4, 5), (2, 3, 2, 2, 3)):
            if mode == "channel" and len(shape) < 3:
                continue                   # MXNet: "Input need to have a least 3 dimensions when mode=channel"
            name = "SoftmaxActivation_%s_%dd" % (mode, len(shape))
            attrs = {} if mode == "instance" else {"mode": mode}
            sym = S.SoftmaxActivation(S.var("data"), name="op", **attrs)
            args, out_shapes = make_args(name, sym, {"data": shape})
            x = args["data"].astype(np.float64)
            axis = 1 if mode == "channel" else -1
            backward = len(shape) >= 2        # 1-D: MXNet's backward reads shape_[1] and fails
            heads = head_grads_for(name, out_shapes) if backward else None
            greq = {"data": "write"}
            outs, mx_grads = run_executor(sym, args, greq, heads)
            assert np.abs(outs[0] - sm64(x, axis)).max() < 1e-6, "forward is not a softmax over axis %d" % axis
            record = dict(op="SoftmaxActivation", attrs_given=attrs, outputs=sym.list_outputs(),
                          arguments={"data": list(shape)}, grad_req=greq if backward else None, loss_op=False,
                          inputs=["data"], softmax_axis=axis,
                          note="forward: softmax over axis %d (%s)" % (axis, "FlatTo2D: the last axis" if
                                                                       mode == "instance" else "the channel axis"))
            grads, extra = mx_grads, None
            if backward:
                true_sym = S.softmax(S.var("data"), axis=axis, name="op")
                true_outs, true_grads = run_executor(true_sym, args, greq, heads)
                assert np.abs(true_outs[0] - outs[0]).max() < 1e-6
                if np.abs(true_grads["data"] - mx_grads["data"]).max() > 1e-5 * np.abs(true_grads["data"]).max():
                    grads, extra = true_grads, mx_grads
                    record.update(grad_reference="mx.sym.softmax(data, axis=%d)'s gradient (same forward, same "
                                                 "head gradient)" % axis,
                                  mxnet_grad="MXNet's SoftmaxActivation backward: y * (dy - sum over axis 1 of "
                                             "dy * y), not the derivative of its forward")
                else:
                    record.update(grad_reference="MXNet's SoftmaxActivation backward (the derivative of its forward)")
                h = heads[0]
                record["fd_check"] = fd_check(lambda a: (h * sm64(a["data"], axis)).sum(), args, grads, name)
            else:
                record["note"] += "; no backward: MXNet 1.9.1's fails on 1-D data (shape_[1] out of range)"
            save(name, sym.tojson(), arrays_of(args, outs, heads, grads, extra), **record)


if __name__ == "__main__":
    MANIFEST["environment"] = env_info()
    repeated_cases()
    gluon_case()
    loss_case()
    dropout_case()
    softmax_activation_cases()
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(MANIFEST, f, indent=1)
        f.write("\n")
    with open(os.path.join(HERE, "mxnet_ops.json"), "w") as f:
        json.dump({"mxnet_version": mx.__version__, "operators": sorted(mx.operator.get_all_registered_operators())},
                  f, indent=0)
        f.write("\n")
