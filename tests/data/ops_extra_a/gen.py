"""Reference cases made by the real Apache MXNet 1.9.1 (numpy 1.23.5, CPU pip build, MXNet's native kernels:
MXNET_MKLDNN_ENABLED=0) for mxcc issue 22 part A: math, indexing and shape operators.

For every case (layout as shared/mxnet-ref/ops, gen/gen_ops.py):

  cases/<case>-symbol.json   the symbol as MXNet wrote it (Symbol.tojson())
  cases/<case>.npz           arg:<name>       every argument fed to the executor (all float32 inputs)
                             out:<i>          forward output i, as float32 (an int/bool/float16 output of
                                              Cast or one_hot converted exactly: every value fits; a float64
                                              one rounded)
                             head_grad:<i>    head gradient given for output i
                             grad:<name>      the gradient of every argument (grad_req 'write' on all of them)

Protocol: ex = sym.simple_bind(mx.cpu(), grad_req='write', **shapes); set args; outs = ex.forward(is_train=True);
ex.backward(out_grads=[head_grad:<i>...]); read ex.grad_dict. Cases without arguments (_arange) run the
forward only. `group` in the manifest: "cast" cases need mxcc's new Cast (ops/math_ops.py CAST).

Also written into manifest.json, from the same MXNet:
  slice_table   slice on shapes (10,) and (4, 5) for a grid of begin/end/step (None, negatives, past the
                ends): MXNet's output shape and the flat positions of the input it selects (or its error)
  shape_table   shape rules of the new ops on edge cases: the symbol JSON, input shapes, and MXNet's output
                shapes or error (infer_shape)

Run with MXNet's interpreter from the repository root (mxcc's tests never import mxnet):

    /tmp/mxvenv/bin/python tests/data/ops_extra_a/gen.py
"""
import json
import os
import sys
import zlib

os.environ["MXNET_MKLDNN_ENABLED"] = "0"        # MXNet's native kernels (where oneDNN differs, they are the truth)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")

import numpy as np  # noqa: E402
import mxnet as mx  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_DIR = os.path.join(HERE, "cases")
S = mx.sym
NAN, INF = float("nan"), float("inf")


def rng_for(name, base=0):
    return np.random.RandomState((zlib.crc32(name.encode("utf-8")) + base) % (2 ** 31))


def json_ops(sym_json):
    counts = {}
    for n in sym_json["nodes"]:
        if n["op"] != "null":
            counts[n["op"]] = counts.get(n["op"], 0) + 1
    return dict(sorted(counts.items()))


MANIFEST = {"generator": "tests/data/ops_extra_a/gen.py", "environment": None, "protocol": __doc__, "cases": {},
            "slice_table": [], "shape_table": []}


# -- input values ------------------------------------------------------------------------------------------
def normal(scale=1.0):
    return lambda r, s: r.normal(0, scale, size=s)


def uniform(lo, hi):
    return lambda r, s: r.uniform(lo, hi, size=s)


def signed_uniform(lo, hi):
    """|x| in [lo, hi), random sign: away from 0 (reciprocal)."""
    return lambda r, s: r.uniform(lo, hi, size=s) * r.choice([-1.0, 1.0], size=s)


def with_values(gen, values):
    """`gen`, with the first entries replaced by `values` (ties, halves, special values)."""
    def make(r, s):
        a = np.asarray(gen(r, s), dtype=np.float64).ravel()
        v = np.asarray(values, dtype=np.float64)[:a.size]
        a[:v.size] = v
        r.shuffle(a)
        return a.reshape(s)
    return make


def indices(lo, hi, extra=()):
    """Float indices in [lo, hi), some fractional, with `extra` values mixed in."""
    return with_values(lambda r, s: np.round(r.uniform(lo, hi, size=s) * 2) / 2, extra)


def away_from(gen, points, margin=0.05):
    def make(r, s):
        a = np.asarray(gen(r, s), dtype=np.float64)
        for p in points:
            close = np.abs(a - p) < margin
            a[close] = p + np.where(a[close] >= p, 1, -1) * margin * 2
        return a
    return make


# -- cases -------------------------------------------------------------------------------------------------
def case(name, sym, inputs, note="", group="main", ties=None):
    """inputs: {argument name: (shape, value maker)} in any order. ties: {name: other} copies `other`'s value
    into `name` at every third position (maximum/minimum ties)."""
    r = rng_for(name, 7)
    args = {}
    for k in sym.list_arguments():
        shape, make = inputs[k]
        args[k] = np.asarray(make(r, shape), dtype=np.float32)
    for k, other in (ties or {}).items():
        args[k].ravel()[::3] = args[other].ravel()[::3]
    shapes = {k: v.shape for k, v in args.items()}
    ex = sym.simple_bind(mx.cpu(), grad_req="write", **shapes) if args else sym.simple_bind(mx.cpu())
    for k, v in args.items():
        ex.arg_dict[k][:] = v
    outs = ex.forward(is_train=True)
    heads = [rng_for(name, 11).normal(0, 1, size=o.shape).astype(np.float32) for o in outs]
    outs = [o.asnumpy() for o in outs]
    out_dtypes = ["bfloat16" if o.dtype.names else o.dtype.name for o in outs]
    outs = [bfloat16_as_float32(o) if o.dtype.names else o for o in outs]
    grads = {}
    if args:
        ex.backward(out_grads=[mx.nd.array(h) for h in heads])    # float32: MXNet converts it to the output dtype
        mx.nd.waitall()
        grads = {k: ex.grad_dict[k].asnumpy().astype(np.float32) for k in args}
    for o in outs:                     # float64 outputs (dtype='float64') are rounded to float32, as mxcc's are
        exact = np.array_equal(o.astype(np.float32).astype(o.dtype), o, equal_nan=o.dtype.kind == "f")
        assert o.dtype == np.float64 or exact, "an output does not fit float32 exactly"
    arrays = {"arg:" + k: v for k, v in args.items()}
    arrays.update({"out:%d" % i: o.astype(np.float32) for i, o in enumerate(outs)})
    if args:
        arrays.update({"head_grad:%d" % i: h for i, h in enumerate(heads)})
        arrays.update({"grad:" + k: g for k, g in grads.items()})
    os.makedirs(CASES_DIR, exist_ok=True)
    sym_json = sym.tojson()
    with open(os.path.join(CASES_DIR, name + "-symbol.json"), "w") as f:
        f.write(sym_json)
    np.savez_compressed(os.path.join(CASES_DIR, name + ".npz"), **arrays)
    MANIFEST["cases"][name] = dict(
        ops_in_json=json_ops(json.loads(sym_json)), group=group, arguments={k: list(v.shape) for k, v in args.items()},
        outputs=sym.list_outputs(), output_dtypes=out_dtypes, grad_req={k: "write" for k in args},
        backward=bool(args), note=note,
        files={"symbol": "cases/%s-symbol.json" % name, "arrays": "cases/%s.npz" % name})
    print("ok", name)


def bfloat16_as_float32(o):
    """MXNet returns a bfloat16 array as a structured uint16 record (its bits): the float32 it stands for."""
    return (np.ascontiguousarray(o).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def V(name="data"):
    return S.var(name)


def unary_cases():
    x34 = (3, 4)
    case("sign", S.sign(V(), name="op"), {"data": ((4, 5), with_values(normal(), [0, 0, -0.0, 1e-30]))},
         "sign: -1, 0, 1; zero gradient")
    case("reciprocal", S.reciprocal(V(), name="op"), {"data": (x34, signed_uniform(0.5, 2))})
    case("log1p", S.log1p(V(), name="op"), {"data": (x34, uniform(-0.9, 3))})
    case("expm1", S.expm1(V(), name="op"), {"data": (x34, normal())})
    case("erf", S.erf(V(), name="op"), {"data": (x34, normal(1.5))})
    halves = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 3.0]
    for op in ("floor", "ceil", "round"):
        case(op, getattr(S, op)(V(), name="op"), {"data": ((4, 5), with_values(normal(3), halves))},
             "ties at .5 (round: away from zero); zero gradient")
    case("rsqrt", S.rsqrt(V(), name="op"), {"data": (x34, uniform(0.2, 4))})
    hs = away_from(normal(4), [-2.5, 2.5, -4 / 3, 2.0])
    case("hard_sigmoid", S.hard_sigmoid(V(), name="op"), {"data": ((4, 6), hs)}, "defaults alpha=0.2 beta=0.5")
    case("hard_sigmoid_ab", S.hard_sigmoid(V(), alpha=0.3, beta=0.4, name="op"), {"data": ((4, 6), hs)})


def binary_cases():
    x = (3, 4)
    case("power", S._internal._power(V("a"), V("b"), name="op"),
         {"a": (x, uniform(0.5, 2)), "b": (x, normal())})
    case("maximum", S._internal._maximum(V("a"), V("b"), name="op"), {"a": (x, normal()), "b": (x, normal())},
         "ties (every third element equal): the gradient goes to lhs", ties={"b": "a"})
    case("minimum", S._internal._minimum(V("a"), V("b"), name="op"), {"a": (x, normal()), "b": (x, normal())},
         "ties: the gradient goes to lhs", ties={"b": "a"})
    case("power_scalar", S._internal._power_scalar(V(), scalar=2.5, name="op"), {"data": (x, uniform(0.2, 2))})
    case("power_scalar_int", V() ** 3, {"data": (x, normal())}, "x ** 3 from the Python operator")
    case("rpower_scalar", S._internal._rpower_scalar(V(), scalar=1.7, name="op"), {"data": (x, normal())})
    case("rpower_scalar_op", 2 ** V(), {"data": (x, normal())}, "2 ** x from the Python operator")
    ties = with_values(normal(), [0.3] * 4)
    for op in ("maximum", "minimum"):
        case(op + "_scalar", getattr(S._internal, "_%s_scalar" % op)(V(), scalar=0.3, name="op"), {"data": (x, ties)},
             "ties at the scalar get the gradient")
    case("broadcast_power", S.broadcast_power(V("a"), V("b"), name="op"),
         {"a": ((2, 3, 1), uniform(0.5, 2)), "b": ((1, 3, 4), normal())})
    case("where", S.where(V("c"), V("x"), V("y"), name="op"),
         {"c": ((3, 4), with_values(lambda r, s: r.randint(-1, 2, size=s), [NAN, 0.5])), "x": ((3, 4), normal()),
          "y": ((3, 4), normal())}, "condition nonzero (NaN included) picks x; condition's gradient is zero")
    case("where_rows", S.where(V("c"), V("x"), V("y"), name="op"),
         {"c": ((3,), lambda r, s: np.array([0, 2, -1])), "x": ((3, 2, 2), normal()), "y": ((3, 2, 2), normal())},
         "1-D condition: one per row of x")


def shape_cases():
    case("broadcast_to", S.broadcast_to(V(), shape=(2, 0, 4), name="op"), {"data": ((1, 3, 1), normal())},
         "0 keeps the size")
    case("broadcast_like", S.broadcast_like(V("a"), V("b"), name="op"),
         {"a": ((1, 3), normal()), "b": ((4, 3), normal())}, "rhs gets a zero gradient")
    case("broadcast_like_axes", S.broadcast_like(V("a"), V("b"), lhs_axes=(0, 2), rhs_axes=(1, -3), name="op"),
         {"a": ((1, 3, 1), normal()), "b": ((5, 6, 7), normal())})
    case("tile", S.tile(V(), reps=(2,), name="op"), {"data": ((2, 3), normal())})
    case("tile_more_reps", S.tile(V(), reps=(2, 1, 3), name="op"), {"data": ((2, 3), normal())})
    case("tile_fewer_reps", S.tile(V(), reps=(2, 2), name="op"), {"data": ((2, 3, 2), normal())})
    case("tile_empty", S.tile(V(), reps=(), name="op"), {"data": ((2, 3), normal())}, "reps=() is the identity")
    case("repeat_flat", S.repeat(V(), repeats=2, name="op"), {"data": ((2, 3), normal())}, "axis=None: flattened")
    case("repeat_axis", S.repeat(V(), repeats=3, axis=-1, name="op"), {"data": ((2, 3, 2), normal())})
    case("repeat_axis0", S.repeat(V(), repeats=2, axis=0, name="op"), {"data": ((2, 3), normal())})
    case("stack", S.stack(V("a"), V("b"), V("c"), axis=1, name="op"),
         {k: ((2, 3), normal()) for k in "abc"})
    case("stack_last", S.stack(V("a"), V("b"), axis=-1, name="op"), {k: ((2, 3), normal()) for k in "ab"})
    case("reshape_like", S.reshape_like(V("a"), V("b"), name="op"),
         {"a": ((2, 3, 4), normal()), "b": ((6, 4), normal())})
    case("reshape_like_ranges",
         S.reshape_like(V("a"), V("b"), lhs_begin=1, lhs_end=3, rhs_begin=1, rhs_end=2, name="op"),
         {"a": ((2, 3, 4), normal()), "b": ((5, 12, 7), normal())})
    case("reshape_like_negative", S.reshape_like(V("a"), V("b"), lhs_begin=-2, rhs_begin=-1, rhs_end=None, name="op"),
         {"a": ((2, 3, 4), normal()), "b": ((5, 12), normal())})


def index_cases():
    case("slice", S.slice(V(), begin=(1,), end=(3,), name="op"), {"data": ((4, 5, 6), normal())})
    case("slice_steps", S.slice(V(), begin=(None, 4, -1), end=(None, 0, None), step=(2, -2, -2), name="op"),
         {"data": ((4, 5, 6), normal())})
    case("slice_clamped", S.slice(V(), begin=(-1, -20, 10), end=(-5, 100, -100), step=(-1, 3, -3), name="op"),
         {"data": ((4, 5, 6), normal())}, "begins and ends past the ends are clamped")
    case("crop", S.crop(V(), begin=(0, 1), end=(2, None), name="op"), {"data": ((3, 4), normal())},
         "crop is slice's alias (the JSON says slice)")
    case("slice_like", S.slice_like(V("a"), V("b"), name="op"),
         {"a": ((4, 5, 6), normal()), "b": ((2, 5, 3), normal())})
    case("slice_like_axes", S.slice_like(V("a"), V("b"), axes=(0, -1), name="op"),
         {"a": ((4, 5, 6), normal()), "b": ((3, 1, 4), normal())})
    case("take", S.take(V("a"), V("i"), name="op"),
         {"a": ((5, 3), normal()), "i": ((2, 4), indices(0, 5, [-1.7, -0.5, 4.9, 7, NAN, 2, 2]))},
         "clip: indices truncated toward zero then clipped (NaN: 0); repeated indices add up in the gradient")
    case("take_wrap", S.take(V("a"), V("i"), axis=1, mode="wrap", name="op"),
         {"a": ((2, 4, 3), normal()), "i": ((5,), indices(-6, 9, [-1.5, -6, 9.5, 3e9, NAN]))},
         "wrap: Python's modulo of the int64 index (3e9 and NaN included)")
    case("take_last_axis", S.take(V("a"), V("i"), axis=-1, mode="raise", name="op"),
         {"a": ((2, 3, 4), normal()), "i": ((3,), lambda r, s: np.array([3, 0, 3]))}, "mode='raise', valid indices")
    case("pick", S.pick(V("d"), V("i"), axis=1, name="op"),
         {"d": ((3, 4, 5), normal()), "i": ((3, 5), indices(-1, 5, [-1, 4, 7, -5, 2.9, 3e9, NAN]))},
         "clip (int32 conversion: 3e9 and NaN give 0)")
    case("pick_wrap_keepdims", S.pick(V("d"), V("i"), axis=-1, keepdims=True, mode="wrap", name="op"),
         {"d": ((2, 3, 4), normal()), "i": ((2, 3, 1), indices(-9, 9, [-1.5, 3e9]))})
    case("pick_1d", S.pick(V("d"), V("i"), axis=0, name="op"),
         {"d": ((6,), normal()), "i": ((1,), lambda r, s: np.array([4.0]))},
         "1-D data: the output is (1,)")
    case("one_hot", S.one_hot(V("i"), depth=5, on_value=2.5, off_value=-1, name="op"),
         {"i": ((2, 4), indices(0, 5, [-1, -0.5, 1.7, 4.9, 5, 3e9, NAN]))}, "indices' gradient is zero")
    case("one_hot_int", S.one_hot(V("i"), depth=3, on_value=2.7, off_value=-0.5, dtype="int32", name="op"),
         {"i": ((4,), indices(0, 3))}, "dtype int32: on 2.7 -> 2, off -0.5 -> 0")
    case("one_hot_half", S.one_hot(V("i"), depth=3, on_value=0.1, dtype="float16", name="op"),
         {"i": ((4,), indices(0, 3))}, "dtype float16: on 0.1 -> 0.0999755859375")
    case("arange", S.arange(1, 5, 0.5, repeat=2, name="op"), {}, "no inputs")
    case("arange_stop_none", S.arange(7.5, name="op"), {}, "stop=None: range(0, start)")
    case("arange_negative_step", S.arange(3, -2, -1.5, name="op"), {})
    case("arange_int", S.arange(-2.5, 3, 1.3, dtype="int32", name="op"), {}, "start and step truncated first")
    case("arange_fractions", S.arange(0.1, 1.0, 0.1, name="op"), {}, "float32 arithmetic")
    case("arange_float64", S.arange(0.1, 1.0, 0.1, dtype="float64", name="op"), {}, "double arithmetic")
    case("arange_large", S.arange(16777216, 16777236, 1, name="op"), {}, "float32 rounding past 2^24")
    case("arange_times_data", S.broadcast_mul(V(), S.arange(6, name="ar"), name="op"), {"data": ((2, 6), normal())},
         "an _arange in a graph with inputs")
    case("arange_like", S.contrib.arange_like(V(), start=1.5, step=0.5, repeat=2, name="op"),
         {"data": ((2, 3), normal())})
    case("arange_like_axis", S.contrib.arange_like(V(), start=1, step=2, axis=-1, name="op"),
         {"data": ((2, 3, 4), normal())})


def cast_cases():
    special = [NAN, INF, -INF, 1e30, -1e30, 3e9, -3e9, 2147483520.0, -2147483648.0, 300, -200, -129, 255.5, 127.9,
               -128.7, -0.7, 0.7, -0.0, 65520, 65519, 1e5, 1e-8, 6e-5, 2049, 1 / 3, 1.01171875, -2.7, 1e-40]
    data = with_values(normal(3), special)
    for dtype in ("int32", "int64", "int8", "uint8", "bool", "float16", "bfloat16", "float32", "float64"):
        if dtype == "bfloat16":              # MXNet's Python API cannot name bfloat16 (numpy has no such dtype)
            js = json.loads(S.Cast(V(), dtype="float16", name="op").tojson())
            js["nodes"][1]["attrs"]["dtype"] = "bfloat16"
            sym = S.load_json(json.dumps(js))
        else:
            sym = S.Cast(V(), dtype=dtype, name="op")
        case("cast_" + dtype, sym, {"data": ((6, 7), data)}, "special values; the gradient is the head gradient "
             "cast to %s (MXNet casts it to the output's dtype and back)" % dtype, group="cast")
    chain = S.Cast(S.Cast(V(), dtype="int32", name="to_int"), dtype="float32", name="op") * 2
    case("cast_chain", chain, {"data": ((3, 4), normal(3))}, "Cast(int32) then Cast(float32): the gradient is "
         "truncated too", group="cast")


# -- tables ------------------------------------------------------------------------------------------------
def _err(e):
    s = str(e).strip()
    i = s.find("Check failed")
    return (s[i:] if i >= 0 else s.splitlines()[-1] if s else type(e).__name__)[:200]


def slice_table():
    a1 = mx.nd.arange(10)
    bs, es, ss = [None, -12, -10, -3, 0, 2, 9, 10, 12], [None, -12, -11, -3, 0, 3, 10, 12], [None, 1, 2, -1, -3]
    combos = [((10,), (b,), (e,), (s,)) for b in bs for e in es for s in ss]
    combos += [((4, 5), (1,), (3,), ()), ((4, 5), (None, -1), (None, 0), (None, -1)),
               ((4, 5), (3, 4), (0, 1), (-2, -2)),
               ((4, 5), (0, 0), (4,), ()), ((4, 5), (0, 0, 0), (1, 1, 1), ()), ((4, 5), (0, 0), (1, 1), (1,)),
               ((4, 5), (0, 1), (4, 5), (0, 1))]
    for shape, b, e, s in combos:
        x = mx.nd.arange(int(np.prod(shape))).reshape(shape) if shape != (10,) else a1
        row = dict(shape=list(shape), begin=list(b), end=list(e), step=list(s))
        try:
            y = mx.nd.slice(x, begin=b, end=e, step=s)
            row.update(out_shape=list(y.shape), picked=[int(v) for v in y.asnumpy().ravel()])
        except mx.base.MXNetError as err:
            row.update(error=_err(err))
        MANIFEST["slice_table"].append(row)
    print("ok slice_table", len(combos))


def shape_table():
    def rule(sym, **shapes):
        row = dict(symbol=sym.tojson(), shapes={k: list(v) for k, v in shapes.items()})
        try:
            _, outs, _ = sym.infer_shape(**shapes)
            if outs is None:
                row.update(error="incomplete")
            else:
                row.update(out_shapes=[list(o) for o in outs])
        except mx.base.MXNetError as err:
            row.update(error=_err(err))
        MANIFEST["shape_table"].append(row)

    d, a, b = V(), V("a"), V("b")
    rule(S.broadcast_to(d, shape=(4, 0)), data=(1, 3))
    rule(S.broadcast_to(d, shape=(4, 3)), data=(3,))
    rule(S.broadcast_to(d, shape=(4, 3)), data=(2, 3))
    rule(S.broadcast_to(d, shape=(-1, 3)), data=(1, 3))
    rule(S.broadcast_like(a, b), a=(1, 3), b=(4, 3))
    rule(S.broadcast_like(a, b), a=(3,), b=(4, 3))
    rule(S.broadcast_like(a, b), a=(2, 3), b=(4, 3))
    rule(S.broadcast_like(a, b, lhs_axes=(0,)), a=(1, 3), b=(4, 5))
    rule(S.broadcast_like(a, b, lhs_axes=(0,), rhs_axes=(0, 1)), a=(1, 3), b=(4, 5))
    rule(S.broadcast_like(a, b, lhs_axes=(0,), rhs_axes=(0,)), a=(2, 3), b=(4, 5))
    rule(S.broadcast_like(a, b, lhs_axes=(0,), rhs_axes=(2,)), a=(1, 3), b=(4, 5, 6))
    rule(S.broadcast_like(a, b, lhs_axes=(0, 0), rhs_axes=(2, 1)), a=(1, 1), b=(4, 5, 6))
    rule(S.broadcast_like(a, b, lhs_axes=(2,), rhs_axes=(0,)), a=(1, 3), b=(4, 5))
    rule(S.broadcast_like(a, b, lhs_axes=(-1,), rhs_axes=(-3,)), a=(1, 3, 1), b=(5, 6, 7))
    rule(S.where(V("c"), a, b), c=(3,), a=(3, 4), b=(3, 4))
    rule(S.where(V("c"), a, b), c=(4,), a=(3, 4), b=(3, 4))
    rule(S.where(V("c"), a, b), c=(3, 4), a=(3, 4), b=(3, 5))
    rule(S.broadcast_power(a, b), a=(2, 3), b=(3, 3))
    rule(S.take(a, b, axis=3), a=(2, 3, 4), b=(2,))
    rule(S.take(a, b, axis=-3), a=(2, 3, 4), b=(2, 2))
    rule(S.pick(d, b, axis=-3), data=(2, 3, 4), b=(2, 3))
    rule(S.pick(d, b, axis=-1), data=(2, 3, 4), b=(1, 3))
    rule(S.pick(d, b, axis=1, keepdims=True), data=(2, 3, 4), b=(2, 1, 4))
    rule(S.stack(a, b, axis=2), a=(2, 3), b=(2, 3))
    rule(S.stack(a, b, axis=3), a=(2, 3), b=(2, 3))
    rule(S.stack(a, b, axis=-4), a=(2, 3), b=(2, 3))
    rule(S.tile(d, reps=(0, 2)), data=(2,))
    rule(S.tile(d, reps=(3, 1, 2)), data=(2, 5))
    rule(S.repeat(d, repeats=0, axis=0), data=(2, 2))
    rule(S.repeat(d, repeats=2, axis=2), data=(2, 2))
    rule(S.repeat(d, repeats=2, axis=-2), data=(2, 2))
    for kw, rhs in [(dict(lhs_begin=1), (3, 2, 2, 2)), (dict(lhs_begin=1, lhs_end=1, rhs_begin=0, rhs_end=0), (5, 12)),
                    (dict(lhs_begin=0, lhs_end=-1, rhs_begin=0, rhs_end=1), (12, 2)), (dict(lhs_end=5), (12, 2)),
                    (dict(lhs_begin=2, lhs_end=1), (12, 2)),
                    (dict(lhs_begin=1, lhs_end=3, rhs_begin=1, rhs_end=2), (5, 12, 7)),
                    ({}, (5,)), ({}, (4, 6))]:
        rule(S.reshape_like(a, b, **kw), a=(2, 3, 4), b=rhs)
    for kw, like in [({}, (1, 2, 3)), (dict(axes=(0, 2)), (1, 2, 3)), (dict(axes=(-1,)), (1, 2, 3)), ({}, (1, 2)),
                     (dict(axes=(0, 1)), (1, 2)), (dict(axes=(2,)), (1, 2)), ({}, (3, 2, 3)),
                     (dict(axes=(0,)), (1, 2, 3, 4)),
                     (dict(axes=(0, 0)), (1, 2, 3))]:
        rule(S.slice_like(a, b, **kw), a=(2, 3, 4), b=like)
    rule(S.one_hot(d, depth=4), data=(2, 3))
    rule(S.arange(3, 3))
    rule(S.arange(3, 5, -1))
    rule(S.arange(0, 1, 0.3, repeat=2))
    rule(S.contrib.arange_like(d, axis=-2), data=(2, 3, 4))
    print("ok shape_table", len(MANIFEST["shape_table"]))


def env_info():
    return {"mxnet_version": mx.__version__, "numpy_version": np.__version__, "python": sys.version.split()[0],
            "features_enabled": sorted(k for k, v in mx.runtime.Features().items() if v.enabled),
            "env": {k: os.environ.get(k) for k in ["OMP_NUM_THREADS", "MXNET_MKLDNN_ENABLED"]}}


if __name__ == "__main__":
    MANIFEST["environment"] = env_info()
    unary_cases()
    binary_cases()
    shape_cases()
    index_cases()
    cast_cases()
    slice_table()
    shape_table()
    tables = {k: MANIFEST.pop(k) for k in ("slice_table", "shape_table")}
    text = json.dumps(MANIFEST, indent=1)[:-2]            # the table rows one per line: the file stays readable
    for k, rows in tables.items():
        text += ',\n "%s": [\n' % k + ",\n".join("  " + json.dumps(r) for r in rows) + "\n ]"
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        f.write(text + "\n}\n")
