"""LSTM language model inference: mxcc vs ONNX Runtime, same weights, numpy in -> numpy out.

    python benchmarks/lstm.py [--threads 1,2] [--batches 1,32] [--vocab 10000] [--rounds 3] [--json out.jsonl]

The network is the word-level LM of Gluon's example (what a hybridized `Embedding -> rnn.LSTM -> Dense`
exports): Embedding(vocab, 512) -> RNN(mode='lstm', state_size=512, num_layers=2, begin states Gluon's default
`_zeros`) -> FullyConnected(vocab, flatten=False), 35 steps (TNC), built with mxcc's Symbol API. Two rows per
batch: the whole LM, and the 2-layer LSTM alone (input (35, batch, 512)), where the recurrence is the work.
ONNX Runtime runs the same weights as ONNX ops written with the onnx helper API: Gather, two LSTM ops (MXNet's
gate order i, f, g, o reordered to ONNX's i, o, f, c; biases Wb then Rb), Squeeze of the direction axis, MatMul
+ Add. Each engine and thread count runs in a fresh process (benchmarks/harness.py); the outputs must agree
(max|mxcc - ort| <= 1e-4 max|ort|). Needs `pip install onnx onnxruntime` (benchmark-only).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

STEPS, HIDDEN, EMBED, LAYERS = 35, 512, 512, 2
ENGINES = ["mxcc", "onnxruntime"]
ONNX_GATES = [0, 3, 1, 2]          # ONNX's i, o, f, c as indices into MXNet's i, f, g, o


def weights(vocab: int, seed: int = 0) -> dict:
    """Gluon-like weights: uniform(-0.1, 0.1) everywhere (biases too, so they are not all zero)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    w = {"embed": (vocab, EMBED), "dense_w": (vocab, HIDDEN), "dense_b": (vocab,)}
    for l in range(LAYERS):
        w[f"l{l}_wx"] = (4 * HIDDEN, EMBED if l == 0 else HIDDEN)
        w[f"l{l}_wh"] = (4 * HIDDEN, HIDDEN)
        w[f"l{l}_bx"] = w[f"l{l}_bh"] = (4 * HIDDEN,)
    return {k: rng.uniform(-0.1, 0.1, s).astype(np.float32) for k, s in w.items()}


def packed(w: dict):
    """MXNet's RNN parameter vector: every layer's i2h and h2h weights, then every layer's two biases."""
    import numpy as np
    parts = [w[f"l{l}_{k}"].ravel() for l in range(LAYERS) for k in ("wx", "wh")]
    parts += [w[f"l{l}_{k}"] for l in range(LAYERS) for k in ("bx", "bh")]
    return np.concatenate(parts)


def mxcc_net(net: str, vocab: int):
    """(symbol, input name, params) of the LM or of its LSTM alone."""
    from mxcc import sym
    x = sym.var("data")
    h = sym.Embedding(x, sym.var("embed"), input_dim=vocab, output_dim=EMBED, name="embedding") if net == "lm" else x
    zeros = [sym._zeros(shape=(LAYERS, 0, HIDDEN), name=f"begin_{s}") for s in ("h", "c")]
    y = sym.RNN(h, sym.var("lstm_parameters"), *zeros, mode="lstm", state_size=HIDDEN, num_layers=LAYERS,
                state_outputs=True, name="lstm")[0]
    if net == "lm":
        y = sym.FullyConnected(y, sym.var("dense_w"), sym.var("dense_b"), num_hidden=vocab, flatten=False,
                               name="decoder")
    return y


def onnx_net(net: str, vocab: int, w: dict, batch: int):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def gates(m):                  # (4H, ...) MXNet i f g o -> ONNX i o f c
        return np.concatenate([m[g * HIDDEN:(g + 1) * HIDDEN] for g in ONNX_GATES])
    inits, nodes = [], []
    x_in = "data"
    if net == "lm":
        inits.append(numpy_helper.from_array(w["embed"], "embed"))
        nodes.append(helper.make_node("Cast", ["data"], ["ids"], to=TensorProto.INT64))
        nodes.append(helper.make_node("Gather", ["embed", "ids"], ["x0"]))
        x_in = "x0"
    for l in range(LAYERS):
        inits += [numpy_helper.from_array(gates(w[f"l{l}_wx"])[None], f"W{l}"),
                  numpy_helper.from_array(gates(w[f"l{l}_wh"])[None], f"R{l}"),
                  numpy_helper.from_array(np.concatenate([gates(w[f"l{l}_bx"]), gates(w[f"l{l}_bh"])])[None], f"B{l}")]
        nodes.append(helper.make_node("LSTM", [x_in, f"W{l}", f"R{l}", f"B{l}"], [f"y{l}"], hidden_size=HIDDEN,
                                      name=f"lstm{l}"))
        inits.append(numpy_helper.from_array(np.array([1], np.int64), f"axis{l}"))
        nodes.append(helper.make_node("Squeeze", [f"y{l}", f"axis{l}"], [f"h{l}"]))   # (T, 1, N, H) -> (T, N, H)
        x_in = f"h{l}"
    out = x_in
    if net == "lm":
        inits += [numpy_helper.from_array(np.ascontiguousarray(w["dense_w"].T), "dense_wt"),
                  numpy_helper.from_array(w["dense_b"], "dense_b")]
        nodes += [helper.make_node("MatMul", [x_in, "dense_wt"], ["logits0"]),
                  helper.make_node("Add", ["logits0", "dense_b"], ["logits"])]
        out = "logits"
    in_shape = [STEPS, batch] if net == "lm" else [STEPS, batch, EMBED]
    out_shape = [STEPS, batch, vocab if net == "lm" else HIDDEN]
    graph = helper.make_graph(nodes, net, [helper.make_tensor_value_info("data", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def worker(spec: dict) -> list[dict]:
    import numpy as np
    threads = int(os.environ["OMP_NUM_THREADS"])
    vocab, engine = spec["vocab"], spec["engine"]
    w = weights(vocab)
    rows = []
    for net in spec["nets"]:
        for batch in spec["batches"]:
            rng = np.random.default_rng(1)
            x = (rng.integers(0, vocab, (STEPS, batch)).astype(np.float32) if net == "lm"
                 else rng.uniform(-1, 1, (STEPS, batch, EMBED)).astype(np.float32))
            if engine == "mxcc":
                import mxcc
                params = {"lstm_parameters": packed(w)}
                if net == "lm":
                    params.update(embed=w["embed"], dense_w=w["dense_w"], dense_b=w["dense_b"])
                m = mxcc.compile(mxcc_net(net, vocab), {"data": x.shape}, params, threads=threads,
                                 name=f"{net}{batch}")
                fn = lambda: m.forward(data=x)  # noqa: E731
                got = m.forward(data=x)[0]
            else:
                import onnxruntime as ort
                so = ort.SessionOptions()
                so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
                so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                sess = ort.InferenceSession(onnx_net(net, vocab, w, batch).SerializeToString(), so,
                                            providers=["CPUExecutionProvider"])
                fn = lambda: sess.run(None, {"data": x})  # noqa: E731
                got = sess.run(None, {"data": x})[0]
            samples = harness.time_call(fn, min_time=spec["min_time"], min_repeats=5)
            flops = 2 * STEPS * batch * 4 * HIDDEN * (EMBED + HIDDEN + (LAYERS - 1) * 2 * HIDDEN) \
                + (2 * STEPS * batch * HIDDEN * vocab if net == "lm" else 0)
            rows.append({"layer": f"{net} batch {batch}", "flops": flops, "samples": samples,
                         "checksum": [float(np.abs(got).max()), got.ravel()[:4096].tolist()]})
    return rows


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--nets", default="lm,lstm", help="lm (Embedding, LSTM, Dense) and/or lstm (the LSTM alone)")
    args = ap.parse_args()
    spec = {"batches": [int(b) for b in args.batches.split(",")], "vocab": args.vocab,
            "nets": args.nets.split(","), "min_time": args.min_time}
    cpu = harness.cpu_info()
    print(f"LSTM LM: Embedding({args.vocab}, {EMBED}) -> LSTM({HIDDEN}, {LAYERS} layers) -> Dense({args.vocab}), "
          f"{STEPS} steps; {cpu['model']}, {cpu['cores']} cores; best round median")
    for t in (int(t) for t in args.threads.split(",")):
        rounds: dict = {}
        checks: dict = {}
        for _ in range(args.rounds):
            for engine in ENGINES:
                for r in harness.run_worker(__file__, {**spec, "engine": engine}, t):
                    rounds.setdefault((r["layer"], r["flops"]), {}).setdefault(engine, []).append(r["samples"])
                    checks.setdefault(r["layer"], {})[engine] = r["checksum"]
        for layer, c in checks.items():        # the two engines computed the same thing
            import numpy as np
            a, b = np.array(c["mxcc"][1]), np.array(c["onnxruntime"][1])
            assert np.abs(a - b).max() <= 1e-4 * c["onnxruntime"][0], f"{layer}: mxcc and ONNX Runtime disagree"
        rows, cols, records = harness.engine_rows(rounds, ENGINES, t, "lstm", [harness.US(0), harness.GFLOPS],
                                                  [("ORT/mxcc", "onnxruntime", "mxcc")])
        harness.print_table(rows, cols)
        harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
