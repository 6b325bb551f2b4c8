"""Reference data made by the real Apache MXNet 1.9.1 in NumPy mode (`npx.set_np()`; numpy 1.23.5, CPU pip build,
MXNet's native kernels: MXNET_MKLDNN_ENABLED=0) for mxcc's NumPy-mode operator names (mxcc/ops/numpy_ops.py) and
NDArray V3 parameter files (mxcc/params.py).

Everything is made the way NumPy-mode users make it: Gluon HybridBlocks written with `F.np`/`F.npx`,
`hybridize()`, run, `export()`; gradients with `autograd`. Files (see README.md):

  models/<net>-symbol.json, models/<net>-0000.params (V3 records, `arg:`/`aux:` names), models/<net>.npz
      (`input:<name>`, `out:<i>`)              cnn_np, mlp_np; cnn_np_aliases is cnn_np's JSON with its ops
                                               renamed to MXNet's `_npx_*` aliases, checked to load in MXNet
                                               and to give the same outputs
  cases/<case>-symbol.json, cases/<case>.npz  one small block per NumPy-mode op: `arg:<name>` (inputs),
      `out:<i>`, `head_grad:<i>`, `grad:<name>` (autograd.record(); backward with the head gradients)
  params/*.params + params/expected.npz        npx.save (list, dict of every dtype, 0-d, empty) and Gluon
                                               save_parameters in NumPy mode; expected.npz keys `<file>/<name>`
  manifest.json                                per model/case: ops and attributes as exported, shapes, notes;
                                               `reshape_table`: npx.reshape / np.reshape codes on shapes, with
                                               MXNet's output shape or error; `refusals`: what MXNet 1.9.1 says
                                               to the attributes mxcc refuses

Run with MXNet's interpreter from the repository root (mxcc's tests never import mxnet):

    /tmp/mxvenv/bin/python tests/data/numpy_mode/gen.py
"""
import json
import os
import zlib

os.environ["MXNET_MKLDNN_ENABLED"] = "0"
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["MXNET_STORAGE_FALLBACK_LOG_VERBOSE"] = "0"

import numpy as onp  # noqa: E402
import mxnet as mx  # noqa: E402
from mxnet import autograd, np, npx  # noqa: E402
from mxnet.gluon import nn  # noqa: E402

npx.set_np()
HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = {"generator": "tests/data/numpy_mode/gen.py", "mxnet": mx.__version__, "numpy": onp.__version__,
            "models": {}, "cases": {}, "reshape_table": [], "refusals": []}


def rng_for(name, base=0):
    return onp.random.RandomState((zlib.crc32(name.encode("utf-8")) + base) % (2 ** 31))


def ops_of(path):
    """[(op, attrs)] of every operator node of an exported JSON, in order."""
    nodes = json.load(open(path))["nodes"]
    return [[n["op"], n.get("attrs", {})] for n in nodes if n["op"] != "null"]


def _err(e):
    lines = [ln for ln in str(e).splitlines() if "Check failed" in ln or "Error" in ln] or [str(e)]
    line = lines[-1]
    i = line.find("Check failed")
    return (line[i:] if i >= 0 else line).strip()[:240]


class Fn(nn.HybridBlock):
    """A block computing fn(F, *inputs): one NumPy-mode op (or a few) under test."""

    def __init__(self, fn, **kw):
        super().__init__(**kw)
        self.fn = fn

    def hybrid_forward(self, F, *xs):
        return self.fn(F, *xs)


# -- op cases ----------------------------------------------------------------------------------------------------
def normal(scale=1.0):
    return lambda r, s: r.normal(0, scale, size=s)


def uniform(lo, hi):
    return lambda r, s: r.uniform(lo, hi, size=s)


def away(lo, hi):
    """|x| in [lo, hi), random sign: away from 0 and from the kinks of abs/sign."""
    return lambda r, s: r.uniform(lo, hi, size=s) * r.choice([-1.0, 1.0], size=s)


def case(name, fn, inputs, note=""):
    """inputs: list of (shape, value maker). Runs the hybridized block under autograd, exports it."""
    r = rng_for(name, 7)
    xs = [onp.asarray(make(r, shape), dtype=onp.float32) for shape, make in inputs]
    blk = Fn(fn, prefix="op_")
    blk.hybridize()
    nds = [np.array(x, dtype="float32") for x in xs]
    for a in nds:
        a.attach_grad()
    with autograd.record():
        outs = blk(*nds)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    heads = [rng_for(name, 11).normal(0, 1, size=o.shape).astype(onp.float32) for o in outs]
    autograd.backward(outs, [np.array(h) for h in heads])
    npx.waitall()
    os.makedirs(os.path.join(HERE, "cases"), exist_ok=True)
    prefix = os.path.join(HERE, "cases", name)
    blk.export(prefix)
    os.remove(prefix + "-0000.params")          # no parameters
    names = [n["name"] for n in json.load(open(prefix + "-symbol.json"))["nodes"] if n["op"] == "null"]
    assert len(names) == len(xs), (name, names)
    arrays = {"arg:" + k: x for k, x in zip(names, xs)}
    for i, (o, h) in enumerate(zip(outs, heads)):
        arrays["out:%d" % i] = o.asnumpy().astype(onp.float32)
        arrays["head_grad:%d" % i] = h
    arrays.update({"grad:" + k: a.grad.asnumpy().astype(onp.float32) for k, a in zip(names, nds)})
    onp.savez_compressed(prefix + ".npz", **arrays)
    MANIFEST["cases"][name] = dict(
        ops=ops_of(prefix + "-symbol.json"), arguments={k: list(x.shape) for k, x in zip(names, xs)},
        outputs=[list(o.shape) for o in outs], output_dtypes=[str(o.dtype) for o in outs], note=note,
        files={"symbol": "cases/%s-symbol.json" % name, "arrays": "cases/%s.npz" % name})
    print("ok", name, [op for op, _ in MANIFEST["cases"][name]["ops"]])


def op_cases():
    x34, n = (3, 4), normal()
    # numpy broadcasting arithmetic
    case("add", lambda F, a, b: a + b, [((3, 4), n), ((4,), n)], "_npi_add: (3,4) + (4,)")
    case("subtract", lambda F, a, b: a - b, [((2, 1, 4), n), ((3, 1), n)], "_npi_subtract: (2,1,4) - (3,1)")
    case("multiply", lambda F, a, b: a * b, [((2, 3, 4), n), ((2, 3, 4), n)], "_npi_multiply, same shapes")
    case("true_divide", lambda F, a, b: a / b, [((2, 3), n), ((3,), away(0.5, 2))], "_npi_true_divide")
    case("power", lambda F, a, b: F.np.power(a, b), [((2, 3), uniform(0.5, 2)), ((2, 1), n)], "_npi_power")
    # scalar forms
    case("add_scalar", lambda F, a: a + 3, [(x34, n)], "is_int True")
    case("subtract_scalar", lambda F, a: a - 0.5, [(x34, n)])
    case("rsubtract_scalar", lambda F, a: 2 - a, [(x34, n)])
    case("multiply_scalar", lambda F, a: a * 0.1, [(x34, n)])
    case("negative_op", lambda F, a: -a, [(x34, n)], "-x is _npi_multiply_scalar(-1)")
    case("true_divide_scalar", lambda F, a: a / 3, [(x34, n)])
    case("rtrue_divide_scalar", lambda F, a: 1 / a, [(x34, away(0.5, 2))])
    case("power_scalar", lambda F, a: a ** 2, [(x34, n)])
    case("rpower_scalar", lambda F, a: 2 ** a, [(x34, n)])
    case("maximum_scalar", lambda F, a: F.np.maximum(a, 0.3), [(x34, n)], "an alias: _maximum_scalar")
    # unary
    for op, maker in [("exp", n), ("log", uniform(0.2, 3)), ("sqrt", uniform(0.2, 3)), ("square", n), ("tanh", n),
                      ("negative", n), ("abs", away(0.1, 2)), ("reciprocal", away(0.5, 2)), ("sign", away(0.1, 2)),
                      ("log1p", uniform(-0.5, 2)), ("expm1", n), ("floor", normal(3)), ("ceil", normal(3))]:
        case(op, lambda F, a, op=op: getattr(F.np, op)(a), [(x34, maker)])
    case("relu", lambda F, a: F.npx.relu(a), [(x34, away(0.05, 2))], "_npx_relu")
    case("sigmoid", lambda F, a: F.npx.sigmoid(a), [(x34, n)], "_npx_sigmoid")
    # reductions (0-d results)
    case("sum_all", lambda F, a: F.np.sum(a), [((3, 4, 2), n)], "axis None: a 0-d result")
    case("sum_axes_keepdims", lambda F, a: F.np.sum(a, axis=(0, 2), keepdims=True), [((3, 4, 2), n)])
    case("sum_no_axes", lambda F, a: F.np.sum(a, axis=()), [((3, 4), n)], "axis (): nothing reduced")
    case("mean_last", lambda F, a: F.np.mean(a, axis=-1), [((3, 4, 5), n)])
    case("mean_all_f64", lambda F, a: F.np.mean(a, dtype="float64"), [((3, 4), n)], "dtype float64: MXNet's "
         "output is float64 (stored rounded to float32)")
    case("max_axis", lambda F, a: F.np.max(a, axis=0), [((3, 4), n)])
    case("min_all", lambda F, a: F.np.min(a), [((3, 4), n)])
    # layout
    case("transpose_none", lambda F, a: F.np.transpose(a), [((2, 3, 4), n)], "axes None: reversed")
    case("transpose_T", lambda F, a: a.T, [((3, 4), n)])
    case("transpose_neg", lambda F, a: F.np.transpose(a, (-1, 0, 1)), [((2, 3, 4), n)], "negative axes")
    case("moveaxis", lambda F, a: F.np.moveaxis(a, [0, 1], [-1, 0]), [((2, 3, 4), n)])
    case("reshape", lambda F, a: F.np.reshape(a, (2, -1)), [((3, 4), n)])
    case("reshape_method", lambda F, a: a.reshape(-1, 2), [((3, 4), n)], "x.reshape: order 'C' written")
    case("npx_reshape_heads", lambda F, a: F.npx.reshape(a, (-2, -2, 2, -1)), [((2, 3, 8), n)],
         "(B, L, U) -> (B, L, heads, U/heads)")
    case("npx_reshape_merge", lambda F, a: F.npx.reshape(a, (-2, -2, -5)), [((2, 3, 2, 4), n)], "-5 merges two")
    case("npx_reshape_split", lambda F, a: F.npx.reshape(a, (-6, 2, -1, -4)), [((4, 3, 5), n)], "-6 splits one")
    case("npx_reshape_reverse", lambda F, a: F.npx.reshape(a, (-1, -2), reverse=True), [((2, 3, 4), n)])
    case("getitem_int", lambda F, a: a[1], [((3, 4), n)], "x[1]: slice + _npx_reshape((-3, -4))")
    case("getitem_col", lambda F, a: a[:, 0, :], [((2, 3, 4), n)], "x[:, 0, :]: slice + _npx_reshape")
    case("squeeze_all", lambda F, a: F.np.squeeze(a), [((1, 3, 1), n)])
    case("squeeze_to_0d", lambda F, a: F.np.squeeze(a, axis=(0, 1)), [((1, 1), n)], "every dim: 0-d")
    case("expand_dims", lambda F, a: F.np.expand_dims(a, 1), [((3, 4), n)], "an alias: expand_dims")
    case("concatenate", lambda F, a, b: F.np.concatenate([a, b], axis=1), [((2, 3), n), ((2, 5), n)])
    case("concatenate_neg", lambda F, a, b: F.np.concatenate([a, b], axis=-1), [((2, 3), n), ((2, 1), n)])
    case("concatenate_none", lambda F, a, b: F.np.concatenate([a, b], axis=None), [((2, 3), n), ((4,), n)],
         "axis None: the flattened inputs")
    case("stack", lambda F, a, b: F.np.stack([a, b], axis=1), [((2, 3), n), ((2, 3), n)])
    case("copy", lambda F, a: F.np.copy(a) * 2, [(x34, n)])
    case("zeros_like", lambda F, a: F.np.zeros_like(a) + a, [(x34, n)], "_npi_full_like(fill_value=0)")
    case("full_like", lambda F, a: F.np.full_like(a, 3.5) * a, [(x34, n)])
    # products
    case("dot_2d", lambda F, a, b: F.np.dot(a, b), [((3, 4), n), ((4, 5), n)])
    case("dot_nd_2d", lambda F, a, b: F.np.dot(a, b), [((2, 3, 4), n), ((4, 5), n)])
    case("dot_vec", lambda F, a, b: F.np.dot(a, b), [((4,), n), ((4,), n)], "vector . vector: 0-d")
    case("matmul_batch", lambda F, a, b: F.np.matmul(a, b), [((2, 3, 4), n), ((2, 4, 5), n)])
    case("matmul_mv", lambda F, a, b: F.np.matmul(a, b), [((3, 4), n), ((4,), n)])
    case("matmul_nd_2d", lambda F, a, b: F.np.matmul(a, b), [((2, 3, 4), n), ((4, 5), n)])
    case("batch_dot_4d", lambda F, a, b: F.npx.batch_dot(a, b, transpose_b=True), [((2, 2, 3, 4), n),
                                                                                 ((2, 2, 5, 4), n)])
    # npx aliases of legacy ops
    case("softmax", lambda F, a: F.npx.softmax(a, axis=-1), [(x34, n)])
    case("log_softmax", lambda F, a: F.npx.log_softmax(a, axis=0), [(x34, n)])
    case("layer_norm", lambda F, a, g, b: F.npx.layer_norm(a, g, b, axis=-1, eps=1e-5),
         [((3, 4), n), ((4,), uniform(0.5, 1.5)), ((4,), n)])
    case("gelu", lambda F, a: F.npx.leaky_relu(a, act_type="gelu"), [(x34, n)])
    case("erf", lambda F, a: F.npx.erf(a), [(x34, n)])
    case("arange_add", lambda F, a: a + F.np.arange(4), [(x34, n)], "_npi_arange, broadcast")
    case("arange_like", lambda F, a: a + F.npx.arange_like(a, axis=1), [(x34, n)])
    case("fully_connected", lambda F, a, w, b: F.npx.fully_connected(a, w, b, num_hidden=3, flatten=False),
         [((2, 2, 4), n), ((3, 4), n), ((3,), n)], "an alias: FullyConnected")


# -- models ------------------------------------------------------------------------------------------------------
class NpCNN(nn.HybridBlock):
    """A small CNN written in NumPy mode: normalization, conv-BN-relu twice with a residual add, max pooling, a
    strided conv with its relu, global average pooling by np.mean, a dense head and its softmax."""

    def __init__(self, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.c1 = nn.Conv2D(8, 3, padding=1, in_channels=3)
            self.b1 = nn.BatchNorm(in_channels=8)
            self.c2 = nn.Conv2D(8, 3, padding=1, in_channels=8, use_bias=False)
            self.b2 = nn.BatchNorm(in_channels=8)
            self.pool = nn.MaxPool2D(2)
            self.c3 = nn.Conv2D(16, 3, strides=2, padding=1, in_channels=8, activation="relu")
            self.fc = nn.Dense(10, in_units=16)

    def hybrid_forward(self, F, x):
        x = (x - 0.45) / 0.225
        y = F.npx.relu(self.b1(self.c1(x)))
        y = F.npx.relu(self.b2(self.c2(y)) + y)
        y = self.c3(self.pool(y))
        logits = self.fc(F.np.mean(y, axis=(2, 3)))
        return logits, F.npx.softmax(logits)


def perturb_batch_norm(net, r):
    for name, p in net.collect_params().items():
        if name.endswith("running_mean"):
            p.set_data(np.array(r.normal(0, 0.5, p.shape).astype(onp.float32)))
        elif name.endswith("running_var"):
            p.set_data(np.array(r.uniform(0.5, 2.0, p.shape).astype(onp.float32)))
        elif name.endswith("gamma"):
            p.set_data(np.array(r.uniform(0.5, 1.5, p.shape).astype(onp.float32)))
        elif name.endswith("beta"):
            p.set_data(np.array(r.normal(0, 0.3, p.shape).astype(onp.float32)))


def model(name, net, inputs, note):
    os.makedirs(os.path.join(HERE, "models"), exist_ok=True)
    prefix = os.path.join(HERE, "models", name)
    net.hybridize()
    outs = net(*[np.array(x) for x in inputs.values()])
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    net.export(prefix)
    arrays = {"input:" + k: v for k, v in inputs.items()}
    arrays.update({"out:%d" % i: o.asnumpy() for i, o in enumerate(outs)})
    onp.savez_compressed(prefix + ".npz", **arrays)
    MANIFEST["models"][name] = dict(ops=ops_of(prefix + "-symbol.json"), inputs={k: list(v.shape) for k, v in
                                                                                 inputs.items()},
                                    outputs=[list(o.shape) for o in outs], note=note,
                                    files={"symbol": "models/%s-symbol.json" % name,
                                           "params": "models/%s-0000.params" % name, "arrays": "models/%s.npz" % name})
    print("ok", name, sorted({op for op, _ in MANIFEST["models"][name]["ops"]}))
    return prefix, outs


ALIAS_OF = {"Convolution": "_npx_convolution", "BatchNorm": "_npx_batch_norm", "Pooling": "_npx_pooling",
            "FullyConnected": "_npx_fully_connected", "Activation": "_npx_activation", "softmax": "_npx_softmax"}


def models():
    r = rng_for("cnn_np")
    cnn = NpCNN(prefix="cnn_")
    cnn.initialize(mx.init.Xavier())
    cnn(np.zeros((1, 3, 16, 16)))
    perturb_batch_norm(cnn, r)
    x = r.uniform(0, 1, (2, 3, 16, 16)).astype(onp.float32)
    prefix, outs = model("cnn_np", cnn, {"data": x}, "CNN in NumPy mode (inference)")
    # the same network, its ops named by MXNet's _npx_* aliases: MXNet loads it and computes the same
    js = json.load(open(prefix + "-symbol.json"))
    for n in js["nodes"]:
        n["op"] = ALIAS_OF.get(n["op"], n["op"])
    alias_prefix = os.path.join(HERE, "models", "cnn_np_aliases")
    with open(alias_prefix + "-symbol.json", "w") as f:
        json.dump(js, f, indent=2)
    blk = nn.SymbolBlock.imports(alias_prefix + "-symbol.json", ["data"], prefix + "-0000.params")
    again = blk(np.array(x))
    assert all(onp.array_equal(a.asnumpy(), b.asnumpy()) for a, b in zip(again, outs)), "aliases changed outputs"
    MANIFEST["models"]["cnn_np_aliases"] = dict(
        MANIFEST["models"]["cnn_np"], ops=ops_of(alias_prefix + "-symbol.json"),
        note="cnn_np's JSON with ops renamed to MXNet's aliases (loaded by MXNet: the same outputs)",
        files=dict(MANIFEST["models"]["cnn_np"]["files"], symbol="models/cnn_np_aliases-symbol.json"))
    print("ok cnn_np_aliases")

    mlp = nn.HybridSequential(prefix="mlp_")
    with mlp.name_scope():
        mlp.add(nn.Dense(32, activation="relu", in_units=20), nn.Dropout(0.3), nn.Dense(16, activation="tanh"),
                nn.Dense(10))
    mlp.initialize(mx.init.Xavier())
    r = rng_for("mlp_np")
    for p in mlp.collect_params().values():
        if p.name.endswith("bias"):
            p.set_data(np.array(r.normal(0, 0.2, p.shape).astype(onp.float32)))
    model("mlp_np", mlp, {"data": r.normal(0, 1, (4, 20)).astype(onp.float32)}, "MLP in NumPy mode (inference)")


# -- tables ------------------------------------------------------------------------------------------------------
def reshape_table():
    rows = [((-2, -1), (2, 3, 4), False), ((-3, -4), (1, 3, 4), False), ((-5, -2), (2, 3, 4), False),
            ((-6, 2, -1, -4), (4, 3, 5), False), ((-6, -1, 2, -4), (4, 3, 5), False), ((-2, -2, 2, -1), (2, 3, 4), False),
            ((-4,), (2, 3), False), ((-2, -4), (2, 3, 4), False), ((-1, -2), (2, 3, 4), True), ((-3, -2), (2, 3), False),
            ((0, -1), (2, 3), False), ((-6, -1, -1), (4,), False), ((5, -1), (2, 3), False), ((-7,), (2,), False),
            ((-2, -6, -1, 2), (3, 4), True), ((-2, -6, 2, -1), (3, 4), True), ((-1, 6), (2, 3), False),
            ((-2, -2, -2), (2, 3), False), ((-1, -1), (2, 3), False), ((-2, -3, -2, -4), (2, 1, 3, 4), False),
            ((-2, -2, -3, -3, -4), (2, 3, 1, 1), False), ((6,), (2, 3), False), ((3, 3), (2, 3), False),
            ((-5, -5), (2, 3, 4, 5), False), ((-5,), (2,), False), ((-6, 3, 3), (4,), False),
            ((-4, -1), (2, 3), False), ((-1, -4), (2, 3), False), ((2, -1, -2), (2, 3, 4), True),
            ((-2, -5, -1), (2, 3, 4, 5), True), ((-6, 2, 2, -2), (4, 3), False), ((4, -3), (4, 1), True)]
    for codes, src, rev in rows:
        for op in ("npx", "np") if not rev else ("npx",):
            a = mx.sym.var("a").as_np_ndarray()
            o = mx.sym.npx.reshape(a, codes, reverse=rev) if op == "npx" else mx.sym.np.reshape(a, codes)
            row = dict(op="_npx_reshape" if op == "npx" else "_np_reshape", newshape=list(codes), shape=list(src),
                       reverse=rev)
            try:
                _, outs, _ = o.infer_shape(a=src)
                row["out_shape"] = list(outs[0])
            except Exception as e:   # noqa: BLE001 (MXNetError)
                row["error"] = _err(e)
            MANIFEST["reshape_table"].append(row)
    print("ok reshape_table", len(MANIFEST["reshape_table"]))


def refusals():
    """What MXNet 1.9.1 itself does with the attributes mxcc refuses."""
    x = np.ones((2, 3))
    for what, fn in [("np.sum(x, initial=2.0)", lambda: np.sum(x, initial=2.0)),
                     ("np.max(x, initial=5.0)", lambda: np.max(x, initial=5.0)),
                     ("np.sum(x, dtype='float16')", lambda: np.sum(x, dtype="float16")),
                     ("np.matmul((1,3,4), (2,4,5))", lambda: np.matmul(np.ones((1, 3, 4)), np.ones((2, 4, 5)))),
                     ("np.dot((2,3), (2,3,4))", lambda: np.dot(np.ones((2, 3)), np.ones((2, 3, 4))))]:
        try:
            out = fn()
            out.wait_to_read()            # MXNet runs ops asynchronously: the error surfaces here
            MANIFEST["refusals"].append(dict(call=what, mxnet=f"returns shape {out.shape} {out.dtype}"))
        except Exception as e:   # noqa: BLE001
            MANIFEST["refusals"].append(dict(call=what, mxnet="error: " + _err(e)))


# -- V3 parameter files ----------------------------------------------------------------------------------------
def params_files():
    d = os.path.join(HERE, "params")
    os.makedirs(d, exist_ok=True)
    r = rng_for("params")
    expected = {}
    arrs = [np.array(r.normal(0, 1, (2, 3)).astype(onp.float32)), np.array(2.5)]
    npx.save(os.path.join(d, "npx_save_list.params"), arrs)
    expected.update({"npx_save_list.params/%d" % i: a.asnumpy() for i, a in enumerate(arrs)})
    named = {"w": np.array(r.normal(0, 1, (3, 4)).astype(onp.float32)),
             "f64": np.array(r.normal(0, 1, (2, 2)), dtype="float64"),
             "f16": np.array(r.normal(0, 1, (5,)).astype(onp.float16), dtype="float16"),
             "i32": np.array([1, -2, 3], dtype="int32"), "i64": np.array([[2 ** 40, -7]], dtype="int64"),
             "i8": np.array([-128, 5, 127], dtype="int8"), "u8": np.array([0, 200, 255], dtype="uint8"),
             "b": np.array([True, False, True], dtype="bool"), "scalar": np.array(3.25),
             "empty": np.zeros((0, 4)), "big": np.array(r.normal(0, 1, (7, 11, 3)).astype(onp.float32))}
    npx.save(os.path.join(d, "npx_save_dict.params"), named)
    expected.update({"npx_save_dict.params/" + k: a.asnumpy() for k, a in named.items()})
    dense = nn.Dense(3, in_units=4, prefix="dense_")
    dense.initialize(mx.init.Xavier())
    dense.bias.set_data(np.array(r.normal(0, 1, (3,)).astype(onp.float32)))
    dense.save_parameters(os.path.join(d, "gluon_save_parameters.params"))
    expected.update({"gluon_save_parameters.params/" + k: p.data().asnumpy()
                     for k, p in dense._collect_params_with_prefix().items()})
    onp.savez(os.path.join(d, "expected.npz"), **expected)
    print("ok params", sorted(os.listdir(d)))


if __name__ == "__main__":
    op_cases()
    models()
    reshape_table()
    refusals()
    params_files()
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(MANIFEST, f, indent=1, sort_keys=True)
    print("wrote", os.path.join(HERE, "manifest.json"))
