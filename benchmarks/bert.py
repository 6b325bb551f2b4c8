"""BERT-style encoder inference: mxcc vs ONNX Runtime, same network, same weights, numpy in -> numpy out.

    python benchmarks/bert.py [--nets encoder,attention,ffn] [--threads 1,2] [--rounds 3] [--json out.jsonl]
    python benchmarks/bert.py --layers 20 --threads 1     # the encoder's time by part, both engines' profilers

The network is BERT-base's encoder as GluonNLP writes it in MXNet's NumPy mode (the graph of
tests/data/bert/gen.py, built here with mxcc's Symbol API at full size): 12 layers, hidden 768, 12 heads of
64, feed-forward 3072, sequence 128, batch 1, vocabulary 30522. Word, token-type and position embeddings
(positions: `_contrib_arange_like`), summed, LayerNorm; per layer: query/key/value Dense (flatten=False),
`_npx_reshape` + `_np_transpose` to (B, heads, L, 64), `batch_dot(q, k, transpose_b=True)` * 1/8, softmax,
`batch_dot` with v, transpose back, output Dense, residual add, LayerNorm; Dense 3072 -> GELU (erf form,
LeakyReLU act_type='gelu') -> Dense 768, residual add, LayerNorm. Dropout is in the graph (the identity at
inference). Weights: normal(0, 0.02), biases normal(0, 0.02), LayerNorm gamma 1 and beta 0 (BERT's
initializer, plus small biases so that they are not all zero). Inputs: token ids and token types as int32
(mxcc converts them at the boundary; ONNX Runtime gets them as int64, as its Gather wants).

Three rows (`--nets`): `encoder` (the whole network), `attention` (one layer's attention core alone: the two
batch_dots, the scale and the softmax on (1, 12, 128, 64) queries, keys and values) and `ffn` (one layer's
feed-forward alone: Dense 3072, GELU, Dense 768 on (1, 128, 768)). ONNX Runtime runs the same graphs
written by this file with the onnx helper API, one ONNX node per MXNet node (Gather, MatMul + Add,
LayerNormalization, Reshape, Transpose, MatMul, Mul, Softmax, and GELU as Div, Erf, Add, Mul, Mul, which ORT
fuses into its Gelu / BiasGelu): CPU provider, intra-op threads = thread count, one inter-op thread,
sequential, `ORT_ENABLE_ALL`. Each worker first checks that both engines agree (max |mxcc - ORT| <= 1e-4
max |ORT|). Each thread count runs in a fresh process per round (benchmarks/harness.py); the headline is the
median of the least-disturbed round; ORT/mxcc > 1 means mxcc is faster.
Needs `pip install onnx onnxruntime` (benchmark-only, not mxcc dependencies).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

LAYERS, UNITS, HEADS, HIDDEN, SEQ, BATCH, VOCAB, MAX_LEN, EPS = 12, 768, 12, 3072, 128, 1, 30522, 512, 1e-12
DH = UNITS // HEADS
TOLERANCE = 1e-4      # max |mxcc - ORT| relative to max |ORT|
ENGINES = ["mxcc", "onnxruntime"]


# -- the network, with mxcc's Symbol API ---------------------------------------------------------------------
def _dense(x, units: int, name: str):
    from mxcc import sym
    return sym.FullyConnected(x, sym.var(f"{name}_weight"), sym.var(f"{name}_bias"), num_hidden=units,
                              flatten=False, name=name)


def _attention_core(q, k, v, name: str):
    """(B, heads, L, d) queries, keys, values -> (B, heads, L, d) context: the part whose GEMMs are batch_dots."""
    from mxcc import sym
    scores = sym._npi_multiply_scalar(sym.batch_dot(q, k, transpose_b=True, name=f"{name}_batch_dot0"),
                                      scalar=1.0 / DH ** 0.5, name=f"{name}_scale")
    attn = sym.Dropout(sym.softmax(scores, axis=-1, name=f"{name}_softmax"), p=0.1, name=f"{name}_dropout")
    return sym.batch_dot(attn, v, name=f"{name}_batch_dot1")


def _ffn(x, name: str):
    from mxcc import sym
    h = sym.LeakyReLU(_dense(x, HIDDEN, f"{name}_ffn1"), act_type="gelu", name=f"{name}_gelu")
    return _dense(h, UNITS, f"{name}_ffn2")


def _layer_norm(x, name: str):
    from mxcc import sym
    return sym.LayerNorm(x, sym.var(f"{name}_gamma"), sym.var(f"{name}_beta"), axis=-1, eps=EPS, name=name)


def _layer(x, name: str):
    from mxcc import sym

    def heads(t, i):       # (B, L, U) -> (B, heads, L, d)
        return sym._np_transpose(sym._npx_reshape(t, newshape=(-2, -2, HEADS, -1), name=f"{name}_reshape{i}"),
                                 axes=(0, 2, 1, 3), name=f"{name}_transpose{i}")
    q, k, v = (heads(_dense(x, UNITS, f"{name}_{p}"), i) for i, p in enumerate(("query", "key", "value")))
    ctx = sym._np_transpose(_attention_core(q, k, v, f"{name}_attn"), axes=(0, 2, 1, 3), name=f"{name}_transpose3")
    ctx = sym._npx_reshape(ctx, newshape=(-2, -2, -5), name=f"{name}_reshape3")
    x = _layer_norm(sym._npi_add(x, _dense(ctx, UNITS, f"{name}_proj"), name=f"{name}_add0"), f"{name}_ln_attn")
    return _layer_norm(sym._npi_add(x, _ffn(x, name), name=f"{name}_add1"), f"{name}_ln_ffn")


def network(net: str, layers: int = LAYERS):
    """(symbol, {input: shape}, {input: dtype}) of `net`: encoder, attention or ffn."""
    import numpy as np
    from mxcc import sym
    if net == "attention":
        qkv = [sym.var(n) for n in ("q", "k", "v")]
        return (_attention_core(*qkv, "attn"), {n: (BATCH, HEADS, SEQ, DH) for n in "qkv"},
                dict.fromkeys("qkv", np.float32))
    if net == "ffn":
        return _ffn(sym.var("x"), "layer0"), {"x": (BATCH, SEQ, UNITS)}, {"x": np.float32}
    ids, types = sym.var("token_ids"), sym.var("token_types")
    words = sym.Embedding(ids, sym.var("word_embed_weight"), input_dim=VOCAB, output_dim=UNITS, name="word_embed")
    kinds = sym.Embedding(types, sym.var("type_embed_weight"), input_dim=2, output_dim=UNITS, name="type_embed")
    pos = sym.Embedding(sym._contrib_arange_like(ids, axis=1, name="positions"), sym.var("pos_embed_weight"),
                        input_dim=MAX_LEN, output_dim=UNITS, name="pos_embed")
    x = sym._npi_add(sym._npi_add(words, kinds, name="embed_add0"), pos, name="embed_add1")
    x = sym.Dropout(_layer_norm(x, "embed_ln"), p=0.1, name="embed_dropout")
    for i in range(layers):
        x = _layer(x, f"layer{i}")
    shapes = {"token_ids": (BATCH, SEQ), "token_types": (BATCH, SEQ)}
    return x, shapes, dict.fromkeys(shapes, np.int32)


def weights(graph) -> dict:
    """BERT's initializer: normal(0, 0.02) for every weight and bias, LayerNorm gamma 1 and beta 0."""
    import numpy as np
    rng = np.random.default_rng(0)
    out = {}
    for n in graph.nodes:
        if n.is_variable and n.name not in graph.inputs:
            shape = n.out_types[0].shape
            fill = {"_gamma": np.ones, "_beta": np.zeros}.get(n.name[n.name.rfind("_"):])
            out[n.name] = (fill(shape, np.float32) if fill else
                           rng.normal(0, 0.02, shape).astype(np.float32))
    return out


def inputs(shapes: dict, dtypes: dict) -> dict:
    import numpy as np
    rng = np.random.default_rng(1)
    out = {}
    for name, shape in shapes.items():
        if name == "token_ids":
            out[name] = rng.integers(0, VOCAB, shape).astype(dtypes[name])
        elif name == "token_types":
            out[name] = (np.arange(shape[1]) >= shape[1] // 2).astype(dtypes[name])[None].repeat(shape[0], 0)
        else:
            out[name] = rng.standard_normal(shape).astype(dtypes[name])
    return out


# -- the same graph as ONNX ------------------------------------------------------------------------------------
def to_onnx(graph, params: dict, dtypes: dict):
    """One ONNX node (or a few) per mxcc node, named `<mxcc node>_out[...]` (so ORT's profiler maps back)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    from _onnx import _Writer, _node

    w, name_of, ins = _Writer(), {}, []
    for n in graph.nodes:
        if n.is_variable:
            name_of[n.id, 0] = n.name
            if n.name in params:
                w.const(n.name, params[n.name])
            else:
                elem = TensorProto.INT64 if np.dtype(dtypes[n.name]).kind == "i" else TensorProto.FLOAT
                ins.append(helper.make_tensor_value_info(n.name, elem, list(n.out_types[0].shape)))
            continue
        args, out, op, a = [name_of[r.key] for r in n.inputs], f"{n.name}_out", n.opdef.name, n.params
        name_of[n.id, 0] = out
        shape = n.out_types[0].shape
        if op == "Embedding":
            w.node("Gather", [args[1], args[0]], out)
        elif op == "_contrib_arange_like":   # the positions: a constant (mxcc folds it too)
            w.node("Identity", [w.const(f"{out}_value", np.arange(shape[0]), np.int64)], out)
        elif op == "_npi_add":
            w.node("Add", args, out)
        elif op == "_npi_multiply_scalar":
            w.node("Mul", [args[0], w.const(f"{out}_scalar", a.scalar)], out)
        elif op == "LayerNorm":
            w.node("LayerNormalization", args, out, axis=a.axis, epsilon=float(a.eps))
        elif op in ("_npx_reshape", "_np_reshape"):
            w.node("Reshape", [args[0], w.const(f"{out}_shape", shape, np.int64)], out)
        elif op == "_np_transpose":
            w.node("Transpose", args, out, perm=list(a.axes))
        elif op == "batch_dot":
            lhs, rhs = args
            nd = len(shape)
            swap = list(range(nd - 2)) + [nd - 1, nd - 2]
            if a.transpose_a:
                lhs = w.node("Transpose", [lhs], f"{out}_lhs_t", perm=swap)
            if a.transpose_b:
                rhs = w.node("Transpose", [rhs], f"{out}_rhs_t", perm=swap)
            w.node("MatMul", [lhs, rhs], out)
        elif op == "LeakyReLU" and a.act_type == "gelu":   # 0.5 x (1 + erf(x / sqrt 2)): ORT's GeluFusion pattern
            x = args[0]
            e = w.node("Erf", [w.node("Div", [x, w.const(f"{out}_sqrt2", 2 ** 0.5)], f"{out}_div")], f"{out}_erf")
            one = w.node("Add", [e, w.const(f"{out}_one", 1.0)], f"{out}_add")
            w.node("Mul", [w.node("Mul", [x, one], f"{out}_mul"), w.const(f"{out}_half", 0.5)], out)
        else:          # FullyConnected, softmax, Dropout: benchmarks/_onnx.py's mapping
            _node(w, graph, n, args, out, params)
    outs = [helper.make_tensor_value_info(name_of[h.key], TensorProto.FLOAT, list(graph.type_of(h).shape))
            for h in graph.heads]
    model = helper.make_model(helper.make_graph(w.nodes, "bert", ins, outs, w.inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _ort_feed(x: dict) -> dict:
    import numpy as np
    return {k: v.astype(np.int64) if v.dtype.kind == "i" else v for k, v in x.items()}


def build(net: str, threads: int, profile: bool = False):
    """(mxcc Module, ONNX model, inputs, FLOPs per forward) of `net`."""
    import mxcc
    from mxcc.compiler.driver import inspect_network
    from mxcc.options import CompileOptions
    from _onnx import typed_graph
    symbol, shapes, dtypes = network(net)
    graph = typed_graph(symbol, shapes)
    params = weights(graph)
    flops = sum(g["flops"] for g in inspect_network(symbol, shapes, CompileOptions())["groups"])
    m = mxcc.compile(symbol, shapes, params, threads=threads, name=f"bert_{net}", profile=profile)
    return m, to_onnx(graph, params, dtypes), inputs(shapes, dtypes), flops


def worker(spec: dict) -> list[dict]:
    import numpy as np
    from _onnx import ort_session
    threads = int(os.environ["OMP_NUM_THREADS"])
    rows = []
    for net in spec["nets"]:
        m, model, x, flops = build(net, threads)
        sess = ort_session(model, threads)
        ref, got = sess.run(None, _ort_feed(x))[0], m.forward(**x)[0]
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        if not err <= TOLERANCE:
            raise AssertionError(f"{net}: mxcc and ONNX Runtime disagree ({err:.2e})")
        feed = _ort_feed(x)
        for engine, fn in (("mxcc", lambda: m.forward(**x)), ("onnxruntime", lambda: sess.run(None, feed))):
            rows.append({"layer": net, "flops": flops, "engine": engine, "rel_err": err,
                         "samples": harness.time_call(fn, min_time=spec["min_time"], min_repeats=5)})
    return rows


# -- --layers: the encoder's time by part, from both engines' profilers -------------------------------------------
PARTS = [   # (part, predicate on the MXNet node name), first match wins
    ("embeddings", lambda s: not s.startswith("layer")),
    ("attention batch_dot (QK^T, AV)", lambda s: "_batch_dot" in s),
    ("attention softmax + scale", lambda s: s.endswith(("_softmax", "_scale", "_dropout"))),
    ("Q/K/V/output Dense", lambda s: s.endswith(("_query", "_key", "_value", "_proj"))),
    ("FFN Dense + GELU", lambda s: s.endswith(("_ffn1", "_ffn2", "_gelu"))),
    ("heads reshape/transpose", lambda s: "_reshape" in s or "_transpose" in s),
    ("residual add + LayerNorm", lambda s: True),
]


def _part(node: str) -> str:
    return next(p for p, test in PARTS if test(node))


def _mxcc_parts(m, x, calls: int, path: Path) -> tuple[dict[str, float], dict[str, float]]:
    """({part: median seconds per forward}, {kernel ops: seconds}) from mxcc's profiler (a kernel counts in its
    first node's part)."""
    import json
    import statistics
    from mxcc import profiler
    profiler.set_config(filename=str(path), continuous_dump=False)
    profiler.set_state("run")
    for _ in range(calls):
        m.forward(**x)
    profiler.set_state("stop")
    profiler.dump()
    per: dict[str, list] = {}
    for e in json.loads(path.read_text())["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") not in ("pass", "scope") and "members" in e.get("args", {}):
            per.setdefault(e["name"], [e["args"]["members"][0], e["cat"]]).append(e["dur"] * 1e-6)
    parts: dict[str, float] = {}
    by_op: dict[str, float] = {}
    for node, ops, *t in per.values():
        parts[_part(node)] = parts.get(_part(node), 0.0) + statistics.median(t)
        by_op[ops] = by_op.get(ops, 0.0) + statistics.median(t)
    return parts, by_op


# ORT's nodes that are not named after an MXNet node, by op type: its fusions' names and its reshapes around Gemm
ORT_OWN = {"Gelu": "FFN Dense + GELU", "BiasGelu": "FFN Dense + GELU", "FastGelu": "FFN Dense + GELU",
           "SkipLayerNormalization": "residual add + LayerNorm", "Reshape": "heads reshape/transpose"}


def _ort_parts(model, threads: int, x, calls: int, prefix: str, nodes: set) -> tuple[dict, dict]:
    """({part: median seconds per run}, {ORT op type: seconds}) from ORT's profiler. A node named after an MXNet
    node (`<node>_out...`; a fusion keeps its first node's name) counts in that node's part, the transpose of
    batch_dot's transposed operand (`<node>_out_rhs_t`, into which ORT merges the heads' transpose) in the
    transposes', any other by its op type (ORT_OWN)."""
    import json
    import statistics
    from _onnx import ort_options, ort_session
    so = ort_options(threads)
    so.enable_profiling, so.profile_file_prefix = True, prefix
    sess = ort_session(model, threads, so)
    feed = _ort_feed(x)
    for _ in range(calls + 1):
        sess.run(None, feed)
    per: dict[str, list] = {}
    ops: dict[str, str] = {}
    for e in json.loads(Path(sess.end_profiling()).read_text()):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            per.setdefault(name, []).append(e["dur"] * 1e-6)
            ops[name] = e.get("args", {}).get("op_name", "?")
    parts: dict[str, float] = {}
    by_op: dict[str, float] = {}
    for name, t in per.items():
        med = statistics.median(t[1:] or t)          # t[0]: the warm-up run
        base = name.split("_out")[0]
        if name.endswith(("_rhs_t", "_lhs_t")):
            part = "heads reshape/transpose"
        elif base in nodes:
            part = _part(base)
        else:
            part = ORT_OWN.get(ops[name], "other (ORT's own nodes)")
        parts[part] = parts.get(part, 0.0) + med
        by_op[ops[name]] = by_op.get(ops[name], 0.0) + med
    return parts, by_op


def layers(threads: int, calls: int) -> None:
    m, model, x, _ = build("encoder", threads, profile=True)
    nodes = {n.name for n in model.graph.node}
    nodes = {n.split("_out")[0] for n in nodes}
    with tempfile.TemporaryDirectory(prefix="mxcc-bert-") as tmp:
        mine, mine_by_op = _mxcc_parts(m, x, calls, Path(tmp) / "mxcc.json")
        theirs, by_op = _ort_parts(model, threads, x, calls, str(Path(tmp) / "ort"), nodes)
    names = [p for p, _ in PARTS] + [p for p in theirs if p not in dict(PARTS)]
    rows = [{"part": p, "mxcc_ms": mine.get(p, 0.0) * 1e3, "ort_ms": theirs.get(p, 0.0) * 1e3,
             "ratio": theirs[p] / mine[p] if mine.get(p) and theirs.get(p) else None} for p in names]
    rows.append({"part": "sum of kernels", "mxcc_ms": sum(mine.values()) * 1e3, "ort_ms": sum(theirs.values()) * 1e3,
                 "ratio": sum(theirs.values()) / sum(mine.values())})
    print(f"BERT-base encoder ({LAYERS} layers, seq {SEQ}, batch {BATCH}), {threads} thread(s): median ms per "
          f"forward over {calls} forwards, from each engine's own profiler")
    harness.print_table(rows, [("part", "part"), ("mxcc ms", "mxcc_ms"), ("ORT ms", "ort_ms"),
                               ("ORT/mxcc", "ratio")])
    for who, ops in (("mxcc's kernels", mine_by_op), ("ORT's nodes", by_op)):
        print(f"{who} by op type (ms): " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in
                                                     sorted(ops.items(), key=lambda kv: -kv[1])))


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--nets", default="encoder,attention,ffn", help="comma-separated, of encoder, attention, ffn")
    ap.add_argument("--layers", type=int, metavar="CALLS",
                    help="instead: the encoder's time by part from both engines' profilers (CALLS forwards)")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    if args.layers:
        for t in threads:
            layers(t, args.layers)
        return
    spec = {"nets": args.nets.split(","), "min_time": args.min_time}
    import onnxruntime
    cpu = harness.cpu_info()
    print(f"BERT-base encoder: {LAYERS} layers, hidden {UNITS}, {HEADS} heads, FFN {HIDDEN}, sequence {SEQ}, batch "
          f"{BATCH}; ONNX Runtime {onnxruntime.__version__}; {cpu['model']}, {cpu['cores']} CPUs; best round median")
    for t in threads:
        rounds: dict = {}
        err = 0.0
        for _ in range(args.rounds):
            for r in harness.run_worker(__file__, spec, t):
                rounds.setdefault((r["layer"], r["flops"]), {}).setdefault(r["engine"], []).append(r["samples"])
                err = max(err, r["rel_err"])
        rows, cols, records = harness.engine_rows(rounds, ENGINES, t, "bert", [("ms", lambda s, f: f"{s * 1e3:.2f}"),
                                                                             harness.GFLOPS],
                                                  [("ORT/mxcc", "onnxruntime", "mxcc")])
        harness.print_table(rows, cols)
        print(f"outputs agree: max |mxcc - ORT| / max |ORT| <= {err:.1e}")
        harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
