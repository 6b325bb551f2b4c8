"""A 2-layer BERT-style encoder written as GluonNLP writes it for MXNet's NumPy mode, exported and run by the real
Apache MXNet 1.9.1 (numpy 1.23.5, CPU pip build, MXNet's native kernels: MXNET_MKLDNN_ENABLED=0).

The network (BertEncoder below), all of it in `F.np` / `F.npx`:
  word, token-type and position embeddings (positions: npx.arange_like(tokens, axis=1), broadcast over the
  batch), summed, LayerNorm (eps 1e-12), dropout; per layer: multi-head self-attention (query/key/value Dense
  (flatten=False), npx.reshape (-2, -2, heads, -1) and np.transpose (0, 2, 1, 3) to (B, heads, L, d),
  npx.batch_dot(q, k, transpose_b=True) * 1/sqrt(d), npx.softmax, dropout, npx.batch_dot with v, transpose
  back, npx.reshape (-2, -2, -5), output Dense), dropout, residual add, LayerNorm; feed-forward Dense ->
  GELU (npx.leaky_relu act_type='gelu', the erf form) -> Dense, dropout, residual add, LayerNorm; outputs the
  sequence (B, L, units) and the pooled first token: Dense(tanh) of x[:, 0, :].
Dropout is in the graph (p = 0.1) and is the identity at inference, as in MXNet.

Files: bert2-symbol.json, bert2-0000.params (what `export` writes: V3 records, `arg:` names),
bert2.npz: `input:data0` (token ids), `input:data1` (token types) (int32, as a user passes them; export
names the inputs data0, data1), `out:0`, `out:1` (inference),
`head_grad:0`, `head_grad:1`, `grad:<parameter>` (every parameter's gradient of <out, head_grad> summed over
both outputs, computed by autograd in inference mode: `autograd.record(train_mode=False)`, dropout off);
manifest.json: sizes, ops and attributes as exported, parameter shapes.

Run with MXNet's interpreter from the repository root (mxcc's tests never import mxnet):

    /tmp/mxvenv/bin/python tests/data/bert/gen.py
"""
import json
import math
import os

os.environ["MXNET_MKLDNN_ENABLED"] = "0"
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["MXNET_STORAGE_FALLBACK_LOG_VERBOSE"] = "0"

import numpy as onp  # noqa: E402
import mxnet as mx  # noqa: E402
from mxnet import autograd, np, npx  # noqa: E402
from mxnet.gluon import nn  # noqa: E402

npx.set_np()
HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = dict(vocab=100, units=64, heads=4, hidden=128, layers=2, max_length=32, batch=2, seq=16, dropout=0.1,
              eps=1e-12)


class MultiHeadSelfAttention(nn.HybridBlock):
    def __init__(self, units, heads, dropout, **kw):
        super().__init__(**kw)
        self.units, self.heads = units, heads
        with self.name_scope():
            self.query = nn.Dense(units, flatten=False, in_units=units, prefix="query_")
            self.key = nn.Dense(units, flatten=False, in_units=units, prefix="key_")
            self.value = nn.Dense(units, flatten=False, in_units=units, prefix="value_")
            self.proj = nn.Dense(units, flatten=False, in_units=units, prefix="proj_")
            self.dropout = nn.Dropout(dropout)

    def hybrid_forward(self, F, x):
        def split_heads(t):                                   # (B, L, U) -> (B, heads, L, U / heads)
            return F.np.transpose(F.npx.reshape(t, (-2, -2, self.heads, -1)), (0, 2, 1, 3))
        q, k, v = split_heads(self.query(x)), split_heads(self.key(x)), split_heads(self.value(x))
        scores = F.npx.batch_dot(q, k, transpose_b=True) * (1.0 / math.sqrt(self.units // self.heads))
        attn = self.dropout(F.npx.softmax(scores, axis=-1))
        context = F.np.transpose(F.npx.batch_dot(attn, v), (0, 2, 1, 3))   # (B, L, heads, U / heads)
        return self.proj(F.npx.reshape(context, (-2, -2, -5)))


class EncoderLayer(nn.HybridBlock):
    def __init__(self, units, heads, hidden, dropout, eps, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.attention = MultiHeadSelfAttention(units, heads, dropout, prefix="attn_")
            self.ln_attn = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="ln_attn_")
            self.ffn_1 = nn.Dense(hidden, flatten=False, in_units=units, prefix="ffn1_")
            self.ffn_2 = nn.Dense(units, flatten=False, in_units=hidden, prefix="ffn2_")
            self.ln_ffn = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="ln_ffn_")
            self.dropout = nn.Dropout(dropout)

    def hybrid_forward(self, F, x):
        x = self.ln_attn(x + self.dropout(self.attention(x)))
        h = F.npx.leaky_relu(self.ffn_1(x), act_type="gelu")
        return self.ln_ffn(x + self.dropout(self.ffn_2(h)))


class BertEncoder(nn.HybridBlock):
    def __init__(self, vocab, units, heads, hidden, layers, max_length, dropout, eps, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.word_embed = nn.Embedding(vocab, units, prefix="word_embed_")
            self.token_type_embed = nn.Embedding(2, units, prefix="token_type_embed_")
            self.position_embed = nn.Embedding(max_length, units, prefix="position_embed_")
            self.embed_ln = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="embed_ln_")
            self.embed_dropout = nn.Dropout(dropout)
            self.layers = nn.HybridSequential(prefix="layers_")
            with self.layers.name_scope():
                for i in range(layers):
                    self.layers.add(EncoderLayer(units, heads, hidden, dropout, eps, prefix=f"layer{i}_"))
            self.pooler = nn.Dense(units, activation="tanh", flatten=False, in_units=units, prefix="pooler_")

    def hybrid_forward(self, F, tokens, token_types):
        positions = F.npx.arange_like(tokens, axis=1)                       # (L,)
        x = self.word_embed(tokens) + self.token_type_embed(token_types) + self.position_embed(positions)
        x = self.embed_dropout(self.embed_ln(x))
        x = self.layers(x)
        return x, self.pooler(x[:, 0, :])


def main():
    c = CONFIG
    r = onp.random.RandomState(20240522)
    net = BertEncoder(c["vocab"], c["units"], c["heads"], c["hidden"], c["layers"], c["max_length"], c["dropout"],
                      c["eps"], prefix="bert_")
    net.initialize(mx.init.Normal(0.05))
    tokens = r.randint(0, c["vocab"], (c["batch"], c["seq"])).astype(onp.int32)
    types = (onp.arange(c["seq"])[None, :] >= r.randint(3, c["seq"] - 3, (c["batch"], 1))).astype(onp.int32)
    net(np.array(tokens, dtype="int32"), np.array(types, dtype="int32"))            # shapes
    for name, p in net.collect_params().items():      # BERT-like scales; LayerNorm gamma/beta away from 1/0
        if name.endswith("gamma"):
            p.set_data(np.array(r.uniform(0.7, 1.3, p.shape).astype(onp.float32)))
        elif name.endswith(("beta", "bias")):
            p.set_data(np.array(r.normal(0, 0.1, p.shape).astype(onp.float32)))
        else:
            p.set_data(np.array(r.normal(0, 0.05 if "embed" not in name else 0.5, p.shape).astype(onp.float32)))
    net.hybridize()
    outs = net(np.array(tokens, dtype="int32"), np.array(types, dtype="int32"))
    prefix = os.path.join(HERE, "bert2")
    net.export(prefix)
    heads = [r.normal(0, 1, o.shape).astype(onp.float32) for o in outs]
    with autograd.record(train_mode=False):
        again = net(np.array(tokens, dtype="int32"), np.array(types, dtype="int32"))
    autograd.backward(list(again), [np.array(h) for h in heads])
    npx.waitall()
    for a, b in zip(outs, again):
        assert onp.array_equal(a.asnumpy(), b.asnumpy()), "inference and record(train_mode=False) differ"
    params = net.collect_params()
    js = json.load(open(prefix + "-symbol.json"))
    inputs = [n["name"] for n in js["nodes"] if n["op"] == "null" and n["name"] not in params]
    assert len(inputs) == 2, inputs                 # export names them data0 (tokens), data1 (token types)
    arrays = {"input:" + inputs[0]: tokens, "input:" + inputs[1]: types}
    arrays.update({"out:%d" % i: o.asnumpy() for i, o in enumerate(outs)})
    arrays.update({"head_grad:%d" % i: h for i, h in enumerate(heads)})
    arrays.update({"grad:" + name: p.grad().asnumpy() for name, p in params.items()})
    onp.savez_compressed(prefix + ".npz", **arrays)
    ops = [[n["op"], n.get("attrs", {})] for n in js["nodes"] if n["op"] != "null"]
    manifest = dict(generator="tests/data/bert/gen.py", mxnet=mx.__version__, numpy=onp.__version__, config=c,
                    inputs={k: [c["batch"], c["seq"]] for k in inputs},
                    input_roles={inputs[0]: "token ids (int32)", inputs[1]: "token types (int32)"},
                    outputs=[list(o.shape) for o in outs], op_counts={op: sum(1 for o, _ in ops if o == op)
                                                                     for op in sorted({o for o, _ in ops})},
                    ops=ops, params={name: list(p.shape) for name, p in params.items()},
                    files={"symbol": "bert2-symbol.json", "params": "bert2-0000.params", "arrays": "bert2.npz"})
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print("inputs", inputs, "outputs", manifest["outputs"])
    print("ops", manifest["op_counts"])


if __name__ == "__main__":
    main()
