"""A 2-layer BERT-style encoder written in MXNet's NumPy mode (tests/data/bert, made by its gen.py with MXNet 1.9.1),
compiled from its exported JSON and V3 .params: outputs and every parameter's gradient against MXNet's.

Inputs are token ids and token types as int32 (and int64) numpy arrays, as a user passes them: the Module
converts them to the float32 values the graph computes with (exactly: they are small integers).
Acceptance: outputs max|got - ref| <= 1e-5 * max|ref|; gradients (a poisoning training build, grad_req
'write', forward(is_train=False) so dropout is off as in MXNet's autograd.record(train_mode=False), backward
with MXNet's head gradients) max|got - ref| <= 1e-5 * max|ref| per parameter (measured: 5e-7 at worst, float32
sums of at most a few hundred terms in another order than MXNet's). The attention's key biases
have a gradient of exactly zero (softmax over the keys is invariant to the constant q . b_key a key bias adds
to every score of a row): MXNet's is rounding noise there (~1e-8), and mxcc's must be as small, under 1e-6 of
the largest gradient of the network.
"""
import json

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import ShapeError
from mxcc.graph import load_json
from mxcc_testing import DATA, compile_for_gradients, needs_gcc, rel_err

pytestmark = needs_gcc

REF = DATA / "bert"
MANIFEST = json.loads((REF / "manifest.json").read_text())
SYMBOL, PARAMS = REF / MANIFEST["files"]["symbol"], REF / MANIFEST["files"]["params"]
SHAPES = {k: tuple(v) for k, v in MANIFEST["inputs"].items()}


@pytest.fixture(scope="module")
def ref():
    return np.load(REF / MANIFEST["files"]["arrays"])


@pytest.fixture(scope="module")
def inputs(ref):
    return {k: ref[f"input:{k}"] for k in SHAPES}


def test_graph_is_numpy_mode():
    """The export uses NumPy-mode names (not legacy ones) for the attention's reshapes, transposes and adds."""
    g = load_json(SYMBOL)
    ops = {n.op for n in g.nodes}
    assert {"_npx_reshape", "_np_transpose", "_npi_add", "_npi_multiply_scalar", "batch_dot", "LayerNorm",
            "LeakyReLU", "Embedding", "_contrib_arange_like"} <= ops
    assert dict(g.attrs).get("is_np_shape") == ["int", 1]


def test_inference_matches_mxnet(ref, inputs):
    m = mxcc.compile(SYMBOL, SHAPES, PARAMS)
    assert all(v.dtype == np.int32 for v in inputs.values())
    outs = [o.copy() for o in m.forward(**inputs)]
    assert [list(o.shape) for o in outs] == MANIFEST["outputs"]
    for i, out in enumerate(outs):
        assert rel_err(out, ref[f"out:{i}"]) <= 1e-5, f"output {i}"
    again = m.forward(**{k: v.astype(np.int64) for k, v in inputs.items()})      # int64 ids: the same values
    for a, b in zip(outs, again):
        np.testing.assert_array_equal(a, b)


def test_gradients_match_mxnet(ref, inputs):
    exe = compile_for_gradients(SYMBOL, SHAPES, PARAMS, grad_req="write")
    outs = exe.forward(is_train=False, **{k: v.astype(np.int64) for k, v in inputs.items()})
    for i, out in enumerate(outs):
        assert rel_err(out, ref[f"out:{i}"]) <= 1e-5, f"output {i}"
    exe.backward([ref["head_grad:0"], ref["head_grad:1"]])
    names = [k[5:] for k in ref.files if k.startswith("grad:")]
    assert sorted(names) == sorted(MANIFEST["params"])
    scale = max(float(np.abs(ref[f"grad:{n}"]).max()) for n in names)
    zero = []
    for n in names:
        got, want = exe.grad_dict[n], ref[f"grad:{n}"]
        assert got.shape == want.shape, n
        if np.abs(want).max() <= 1e-6 * scale:          # exactly zero in exact arithmetic (key biases)
            zero.append(n)
            assert np.abs(got).max() <= 1e-6 * scale, n
        else:
            assert rel_err(got, want) <= 1e-5, n
    assert sorted(zero) == [n for n in sorted(names) if n.endswith("attn_key_bias")]
    for k in SHAPES:                                     # token ids: MXNet's Embedding gives them zero gradients
        assert not exe.grad_dict[k].any()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_ids_for_embedding_take_one_hot(dtype):
    """Integer arrays where MXNet users pass them (token ids for Embedding, take and one_hot) are accepted and
    converted to float32 at the boundary: the three against numpy's w[ids], w[ids] and eye(V)[ids], for the
    inference Module and the training Executor (whose ids get no gradient, as MXNet's)."""
    vocab, dim = 50, 8
    ids, w = sym.var("ids"), sym.var("w")
    net = sym.Group([sym.Embedding(ids, w, input_dim=vocab, output_dim=dim, name="embed"),
                     sym.take(w, ids, name="take"), sym.one_hot(ids, depth=vocab, name="onehot")])
    rng = np.random.default_rng(0)
    table = rng.standard_normal((vocab, dim)).astype(np.float32)
    tokens = rng.integers(0, vocab, (3, 7)).astype(dtype)
    refs = [table[tokens], table[tokens], np.eye(vocab, dtype=np.float32)[tokens]]
    m = mxcc.compile(net, {"ids": tokens.shape}, {"w": table})
    for got, ref in zip(m.forward(ids=tokens), refs):
        np.testing.assert_array_equal(got, ref)
    exe = compile_for_gradients(net, {"ids": tokens.shape}, {"w": table}, grad_req="write")
    for got, ref in zip(exe.forward(is_train=True, ids=tokens), refs):
        np.testing.assert_array_equal(got, ref)
    heads = [np.ones(r.shape, np.float32) for r in refs]
    exe.backward(heads)
    want = 2 * np.bincount(tokens.ravel(), minlength=vocab)[:, None] * np.ones(dim, np.float32)  # Embedding + take
    np.testing.assert_array_equal(exe.grad_dict["w"], want)
    assert not exe.grad_dict["ids"].any()
    with pytest.raises(ShapeError, match="'ids'.*float32 cannot hold"):      # beyond float32's exact integers
        m.forward(ids=np.full(tokens.shape, 1 << 25, np.int64))
