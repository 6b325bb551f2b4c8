"""Shape inference with a symbolic batch (passes/infer_batch.py): which dimension of every value holds the batch
N and how many rows per sample, and the networks it rejects for a dynamic batch, naming the node.

The truth is shape arithmetic done by hand from the layers (a BERT head split is heads*N rows of (S, D));
the zoo networks are checked against "every activation is (N, ...)", as MXNet's own shapes are.
"""
import json

import pytest

from mxcc import sym
from mxcc.cli import main
from mxcc.compiler.driver import inspect_network
from mxcc.errors import ShapeError
from mxcc.graph import load_json
from mxcc.graph.ir import Ref
from mxcc.options import CompileOptions
from mxcc.passes import bind, infer_shapes
from mxcc.passes.infer_batch import BatchAxis, BatchDim, format_shape, infer_batch, samples, split_batch_marks
from mxcc_testing import DATA

MODELS = DATA / "models"
ZOO = [("lenet", {"data": (64, 1, 28, 28)}), ("mlp", {"X": (256, 784)}),
       ("resnet18_v1", {"data": (8, 3, 224, 224)})]


def batch_of(net, shapes, axes=None):
    g = bind(net.graph if isinstance(net, sym.Symbol) else net)
    b = infer_batch(g, shapes, axes or {k: 0 for k in shapes})
    return g, b


def by_name(g, b) -> dict:
    """output name -> str(BatchAxis)@axis, or None, for every operator output."""
    return {g.output_name(Ref(n.id, i)): (f"{b.axes[(n.id, i)]}@{b.axes[(n.id, i)].axis}"
                                         if (n.id, i) in b.axes else None)
            for n in g.nodes if not n.is_variable for i in range(n.num_outputs)}


@pytest.mark.parametrize("model, shapes", ZOO, ids=[m for m, _ in ZOO])
def test_zoo_networks_keep_the_batch_leading(model, shapes):
    g, b = batch_of(load_json(MODELS / model / f"{model}-symbol.json"), shapes)
    typed = infer_shapes(g, shapes)
    labels = set(typed.inputs) - set(shapes)
    for n in typed.nodes:
        if n.is_variable:      # weights and aux states: one shape for every batch; data and labels: (N, ...)
            assert (b.of(Ref(n.id)) is not None) == (n.name in shapes or n.name in labels), n.name
        else:
            t = n.out_types[0]      # (BatchNorm's further outputs, its batch mean and variance, are (C,))
            assert b.of(Ref(n.id)) == BatchAxis(0, 1), (n.name, t.shape)
            assert b.shape_at(t.shape, Ref(n.id), 3) == (3,) + t.shape[1:]
    assert all(b.depends(n) for n in typed.nodes if not n.is_variable)


def test_samples_pin_down_the_law():
    assert samples(64) == (64, 63, 1)
    assert samples(2) == (2, 1, 3)
    assert samples(1) == (1, 2, 3)


def attention(heads=4, S=6, D=5):
    """A BERT self-attention block in MXNet 1.x legacy Reshape codes: (N, S, H*D) -> heads*N matrices (S, D)."""
    x = sym.Variable("data")
    def split(t, name):           # (N, S, H*D) -> (N, S, H, D) -> (N, H, S, D) -> (N*H, S, D)
        t = sym.Reshape(t, shape=(0, 0, heads, -1), name=f"{name}_split")
        t = sym.transpose(t, axes=(0, 2, 1, 3), name=f"{name}_heads")
        return sym.Reshape(t, shape=(-3, -2), name=f"{name}_merge")
    q, k, v = (split(sym.FullyConnected(x, num_hidden=heads * D, flatten=False, name=n), n) for n in "qkv")
    att = sym.softmax(sym.batch_dot(q, k, transpose_b=True, name="scores"), axis=-1, name="att")
    ctx = sym.batch_dot(att, v, name="context")                               # (N*H, S, D)
    ctx = sym.Reshape(ctx, shape=(-4, -1, heads, -2), name="unmerge")         # (N, H, S, D)
    ctx = sym.transpose(ctx, axes=(0, 2, 1, 3), name="unheads")               # (N, S, H, D)
    return sym.Reshape(ctx, shape=(0, 0, -1), name="concat_heads")            # (N, S, H*D)


def test_bert_attention_reshape_codes_keep_the_batch():
    g, b = batch_of(attention(heads=4), {"data": (8, 6, 20)})
    got = by_name(g, b)
    for name in ("q_output", "q_split_output", "q_heads_output", "unmerge_output", "unheads_output",
                 "concat_heads_output"):
        assert got[name] == "N@0", name
    for name in ("q_merge_output", "k_merge_output", "scores_output", "att_output", "context_output"):
        assert got[name] == "4N@0", name        # heads rows per sample
    typed = infer_shapes(g, {"data": (8, 6, 20)})
    scores = next(n for n in typed.nodes if n.name == "scores")
    assert format_shape(scores.out_types[0].shape, b.of(Ref(scores.id))) == "(4N, 6, 6)"
    assert b.shape_at(scores.out_types[0].shape, Ref(scores.id), 3) == (12, 6, 6)


def test_time_major_rnn_keeps_the_batch_in_dimension_1():
    # (N, T, C) -> SwapAxis -> (T, N, C), the RNN's layout; its begin states (L, N, H) are per-call inputs
    x = sym.SwapAxis(sym.Variable("data"), dim1=0, dim2=1, name="tnc")
    rnn = sym.RNN(x, sym.Variable("params"), sym.Variable("h0"), sym.Variable("c0"), mode="lstm", state_size=7,
                  num_layers=1, name="lstm")
    out = sym.Reshape(rnn, shape=(-3, 0), name="rows")            # (T*N, H): the batch leading again, T per step
    shapes = {"data": (16, 5, 3), "h0": (1, 16, 7), "c0": (1, 16, 7)}
    g, b = batch_of(out, shapes, {"data": 0, "h0": 1, "c0": 1})
    got = by_name(g, b)
    assert got["tnc_output"] == "N@1" and got["lstm_output"] == "N@1" and got["rows_output"] == "5N@0"
    # without the states as inputs they are parameters sized by the batch: rejected, naming the RNN's input
    with pytest.raises(ShapeError) as e:
        batch_of(out, {"data": (16, 5, 3)})
    assert e.value.node == "lstm" and e.value.input == "state"
    assert "'h0', a parameter" in str(e.value) and "--shape h0=1,?16,7" in str(e.value)


def test_reductions_over_the_batch_have_constant_shapes():
    x = sym.Variable("data")
    mean = sym.sum(sym.FullyConnected(x, num_hidden=3, name="fc"), axis=0, name="total")
    g, b = batch_of(mean, {"data": (8, 4)})
    total = next(n for n in g.nodes if n.name == "total")
    assert b.of(Ref(total.id)) is None and b.depends(total)      # the kernel still reads N rows


@pytest.mark.parametrize("build, node, words", [
    # a Reshape to a fixed total size: (64, 10) -> (640,) holds at N = 64 only
    (lambda x: sym.Reshape(sym.FullyConnected(x, num_hidden=10, name="fc"), shape=(640,), name="fixed"),
     "fixed", ["fixed (Reshape)", "mixed into a fixed size", "at N=63", "fixed_output (640,)"]),
    # Flatten then Reshape with explicit sizes
    (lambda x: sym.Reshape(sym.Flatten(x, name="flat"), shape=(64, 4, 8), name="unflat"),
     "unflat", ["unflat (Reshape)", "fails at N=63", "0 or -1 in the batch's place"]),
    # -4 splits the batch itself into (2, N/2)
    (lambda x: sym.Reshape(x, shape=(-4, 2, -1, -2), name="halves"), "halves", ["halves (Reshape)", "at N=63"]),
    # the batch in two dimensions: an (N, N) product
    (lambda x: sym.dot(sym.Flatten(x), sym.Flatten(x), transpose_b=True, name="gram"), "gram",
     ["gram (dot)", "output 'gram_output'", "(64, 64) at N=64", "(1, 1) at N=1", "dimensions 0, 1"]),
    # N + 5 rows: not a multiple of N
    (lambda x: sym.Concat(x, sym.Variable("extra", shape=(5, 4, 8)), dim=0, name="cat"), "cat",
     ["cat (Concat)", "dimension 0 is not a multiple k*N", "(69, 4, 8) at N=64"]),
    # squeeze() drops the batch dimension at N = 1
    (lambda x: sym.squeeze(sym.Reshape(x, shape=(0, 1, -1), name="r"), name="sq"), "sq",
     ["sq (squeeze)", "rank changes", "(32,) at N=1"]),
    # the batch flattened into a weight's input size: FullyConnected's weight would follow N
    (lambda x: sym.FullyConnected(sym.Reshape(x, shape=(1, -1), name="row"), num_hidden=3, name="fc"), "fc",
     ["fc (FullyConnected)", "input 'weight'", "a parameter", "(3, 32N)"]),
], ids=["fixed-size", "flatten-reshape", "split-batch", "batch-twice", "affine", "squeeze", "param"])
def test_mixed_batches_are_rejected_naming_the_node(build, node, words):
    with pytest.raises(ShapeError) as e:
        batch_of(build(sym.Variable("data")), {"data": (64, 4, 8)})
    assert e.value.node == node
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_a_fixed_label_is_rejected_at_the_loss():
    net = sym.SoftmaxOutput(sym.FullyConnected(sym.Variable("data"), num_hidden=3), name="softmax")
    with pytest.raises(ShapeError) as e:
        batch_of(net, {"data": (8, 4), "softmax_label": (8,)}, {"data": 0})
    assert e.value.node == "softmax" and e.value.input == "label" and "at N=7" in str(e.value)
    _, b = batch_of(net, {"data": (8, 4), "softmax_label": (8,)})         # both marked: fine
    assert b.inputs == {"data": 0, "softmax_label": 0}


def test_marks_and_their_errors():
    assert split_batch_marks({"data": ("?64", 3), "len": (None,), "w": (2, 2)}) == (
        {"data": (64, 3), "len": (64,), "w": (2, 2)}, {"data": 0, "len": 0}, 64)
    assert split_batch_marks({"data": (None, 3)}) == ({"data": (16, 3)}, {"data": 0}, None)
    for bad, words in [({"data": ("?64", "?2")}, "two batch dimensions"), ({"data": ("?x", 1)}, "'?64'"),
                       ({"a": ("?4", 1), "b": ("?8", 1)}, "different maximum batches")]:
        with pytest.raises(ShapeError, match=words):
            split_batch_marks(bad)
    with pytest.raises(ShapeError, match="different maximum batches"):
        infer_batch(bind(attention().graph), {"data": (8, 6, 20), "q_weight": (20, 20)}, {"data": 0, "q_weight": 0})


def test_symbol_infer_shape_answers_symbolically():
    net = sym.SoftmaxOutput(sym.FullyConnected(sym.Variable("data"), num_hidden=10, name="fc"), name="softmax")
    args, outs, aux = net.infer_shape(data=("?64", 784))
    assert [repr(s) for s in args] == ["(N, 784)", "(10, 784)", "(10,)", "(N,)"] and repr(outs) == "[(N, 10)]"
    assert args[0][0] == BatchDim(1, 64) and args[0][0].at(3) == 3
    assert net.infer_shape(data=(None, 784))[1][0][0] == BatchDim(1, None)
    assert attention().infer_shape(data=(None, 6, 20))[1] == [(BatchDim(1), 6, 20)]
    assert net.infer_shape(data=(64, 784))[1] == [(64, 10)]                       # unchanged without a mark


def test_plan_json_records_the_batch_of_every_buffer():
    pj = inspect_network(MODELS / "lenet" / "lenet-symbol.json", {"data": (64, 1, 28, 28)},
                         CompileOptions.from_env(), batch_axes={"data": 0})
    assert pj["batch"] == {"maximum": 64, "inputs": {"data": 0}}
    assert all(o["batch"] == {"axis": 0, "factor": 1} for g in pj["groups"] for o in g["outputs"])
    assert all(g["batch_dependent"] for g in pj["groups"])
    kinds = {s["name"]: (s["kind"], s["batch"]) for s in pj["slots"]}
    assert kinds["data"] == ("input", {"axis": 0, "factor": 1}) and kinds["conv1_weight"] == ("param", None)
    assert kinds["softmax_output"] == ("output", {"axis": 0, "factor": 1})
    static = inspect_network(MODELS / "lenet" / "lenet-symbol.json", {"data": (64, 1, 28, 28)},
                             CompileOptions.from_env())
    assert "batch" not in static and "batch_dependent" not in static["groups"][0]


def test_cli_inspect_prints_the_symbolic_batch(capsys, tmp_path):
    assert main(["inspect", str(MODELS / "mlp" / "mlp-symbol.json"), "--shape", "X=?256,784"]) == 0
    out = capsys.readouterr().out
    assert "Nx128" in out and "input X(N, 784)" in out and "output softmaxoutput0_output(N, 10)" in out
    assert "dynamic batch N, 1 <= N <= 256 (X dimension 0)" in out and "4 of 4 kernels depend on N" in out
    assert main(["inspect", str(MODELS / "mlp" / "mlp-symbol.json"), "--shape", "X=?256,784", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"]["maximum"] == 256
    net = sym.Reshape(sym.Flatten(sym.Variable("data"), name="flat"), shape=(8, 4, 8), name="unflat")
    net.save(str(tmp_path / "bad-symbol.json"))
    assert main(["inspect", str(tmp_path / "bad-symbol.json"), "--shape", "data=?8,4,8"]) == 2
    assert "mxcc: error: unflat (Reshape): the batch is mixed into a fixed size" in capsys.readouterr().err
