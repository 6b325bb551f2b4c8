"""Generated kernels run in parts on mxcc's pool (templates/_kernel.c.j2 `spmd`, codegen/render.py SPMD): each
template whose body is one parallel loop, at a size where the loop is parallel, against numpy float64; the C
has the kernel's `_part` function, and the network selects the pool (no kernel opens an OpenMP region)."""
import re

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.codegen.render import SPMD
from mxcc_testing import needs_gcc, rel_err

pytestmark = needs_gcc


def _pool_max(x, k, s):
    w = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::s, ::s]
    return w.max(axis=(-1, -2))


def _lrn(x, alpha=1e-4, beta=0.75, knorm=2.0, nsize=5):
    """MXNet's LRN: x / (knorm + alpha / nsize * sum of x^2 over nsize channels centred on c) ^ beta."""
    x = x.astype(np.float64)
    sq = np.pad(x ** 2, ((0, 0), (nsize // 2, nsize // 2), (0, 0), (0, 0)))
    win = sum(sq[:, i:i + x.shape[1]] for i in range(nsize))
    return x / (knorm + alpha / nsize * win) ** beta


def _cases(rng):
    f = np.float32
    x4 = rng.standard_normal((2, 32, 57, 57)).astype(f)
    xs = rng.standard_normal((4, 16, 32, 32)).astype(f)
    xr = rng.standard_normal((64, 1024)).astype(f)
    g, b = rng.uniform(0.5, 1.5, 1024).astype(f), rng.standard_normal(1024).astype(f)
    bn = {k: rng.uniform(0.5, 1.5, 32).astype(f) for k in ("gamma", "beta", "moving_mean", "moving_var")}
    idx = rng.integers(0, 300, 4096).astype(f)
    emb = rng.standard_normal((300, 16)).astype(f)
    data = sym.var("data")

    def softmax(x, axis):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def layer_norm(x):
        m = x.mean(-1, keepdims=True)
        return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b

    return [
        ("elemwise", sym.relu(data * 2.0 + 1.0), {"data": xr}, {}, lambda: np.maximum(xr * 2.0 + 1.0, 0)),
        ("pool2d", sym.Pooling(data, kernel=(3, 3), stride=(2, 2), pool_type="max"), {"data": x4}, {},
         lambda: _pool_max(x4.astype(np.float64), 3, 2)),
        ("softmax", sym.softmax(data, axis=1), {"data": xs}, {}, lambda: softmax(xs.astype(np.float64), 1)),
        ("norm_rows", sym.LayerNorm(data, sym.var("g"), sym.var("b"), axis=-1, eps=1e-5), {"data": xr},
         {"g": g, "b": b}, lambda: layer_norm(xr.astype(np.float64))),
        ("batch_norm", sym.BatchNorm(data, name="bn", fix_gamma=False, eps=1e-3), {"data": x4},
         {f"bn_{k}": v for k, v in bn.items()},
         lambda: (x4 - bn["moving_mean"][:, None, None]) / np.sqrt(bn["moving_var"][:, None, None] + 1e-3)
         * bn["gamma"][:, None, None] + bn["beta"][:, None, None]),
        ("embedding", sym.Embedding(data, sym.var("w"), input_dim=300, output_dim=16), {"data": idx}, {"w": emb},
         lambda: emb[idx.astype(int)]),
        ("lrn", sym.LRN(data, alpha=1e-4, beta=0.75, knorm=2.0, nsize=5), {"data": x4}, {}, lambda: _lrn(x4)),
        ("math_cast", sym.Cast(data * 100.0, dtype="int32"), {"data": xr}, {},
         lambda: np.trunc(xr.astype(np.float32) * np.float32(100.0))),
        ("resize_pad", sym.Pad(data, mode="constant", pad_width=(0, 0, 0, 0, 1, 1, 2, 2), constant_value=0.5),
         {"data": x4}, {}, lambda: np.pad(x4, ((0, 0), (0, 0), (1, 1), (2, 2)), constant_values=0.5)),
        ("resize_crop", sym.Crop(data, num_args=1, offset=(3, 5), h_w=(50, 48)), {"data": x4}, {},
         lambda: x4[:, :, 3:53, 5:53]),
        ("loops", sym.broadcast_add(data, sym.var("bias", shape=(32, 1, 1))), {"data": x4}, {"bias": bn["beta"][:, None, None].copy()},
         lambda: x4 + bn["beta"][:, None, None]),
        ("reduce", sym.sum(data, axis=(1, 3)), {"data": x4}, {}, lambda: x4.astype(np.float64).sum(axis=(1, 3))),
        ("copy_rows", sym.Concat(data, sym.relu(data), num_args=2, dim=1), {"data": x4}, {},
         lambda: np.concatenate([x4, np.maximum(x4, 0)], axis=1)),
        ("resize_adaptive_pool", sym._contrib_AdaptiveAvgPooling2D(data, output_size=(7, 7)),
         {"data": x4[:, :, :56, :56].copy()}, {},
         lambda: x4[:, :, :56, :56].astype(np.float64).reshape(2, 32, 7, 8, 7, 8).mean(axis=(3, 5))),
    ]


@pytest.mark.parametrize("i", range(14))
def test_kernel_in_parts_matches_numpy(i, tmp_path):
    name, net, inputs, params, ref = _cases(np.random.default_rng(i))[i]
    m = mxcc.compile(net, {k: v.shape for k, v in inputs.items()}, params or None, out_dir=tmp_path / name,
                     name="net", threads=2)
    c = (tmp_path / name / "net.c").read_text()
    assert "_part(mxcc_ctx *ctx, long part, long parts)" in c, f"{name}: not run in parts"
    assert name != "copy_rows" or re.search(r"concat\d+_part\(mxcc_ctx", c), "the concatenation not run in parts"
    assert "mxcc_pool_select(1)" in c and "#pragma omp parallel" not in c
    got = m.forward(**inputs)[0]
    assert got.shape == ref().shape and rel_err(got, ref()) <= 1e-5, name


def test_every_spmd_template_is_covered():
    covered = {name for name, *_ in _cases(np.random.default_rng(0))}
    assert {t.split("/")[-1].split(".")[0] for t in SPMD} == covered


def test_unpacked_gemm_on_the_pool(tmp_path):
    """A GEMM of two per-call inputs (nothing to pack at bind time), big enough to split rows over threads: on
    the pool each row group packs its own B panels (no barrier); against numpy."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((512, 256)).astype(np.float32), rng.standard_normal((256, 384)).astype(np.float32)
    m = mxcc.compile(sym.dot(sym.var("a"), sym.var("b")), {"a": a.shape, "b": b.shape}, out_dir=tmp_path / "dot",
                     name="net", threads=2)
    c = (tmp_path / "dot" / "net.c").read_text()
    assert "mxcc_gemm_f32(" in c and "mxcc_pool_select(1)" in c
    assert rel_err(m.forward(a=a, b=b)[0], a.astype(np.float64) @ b) <= 1e-5
