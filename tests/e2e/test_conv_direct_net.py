"""A small CNN whose convolutions take the direct path (runtime_c/conv/conv_direct_f32.c): a 3-channel stem
(3x3 stride 2, BatchNorm folded into its epilogue, relu) and a 16-channel 3x3 stride-2 layer with a residual
from a 1x1 projection, then global pooling and a classifier, end to end against a float64 numpy forward, at 1 and
2 threads (identical bits), and again after set_params (the direct weight layout is repacked by net_prepare).

Tolerance: float32 sums of at most K = 144 products through two layers: 1e-5 of max|ref|."""
import numpy as np

import mxcc
from mxcc import sym
from mxcc_testing import needs_gcc, rel_err


def _net():
    with sym.NameManager():
        d = sym.var("data")
        h = sym.Convolution(d, kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=16, no_bias=True, name="stem")
        h = sym.relu(sym.BatchNorm(h, fix_gamma=False, name="bn"))
        proj = sym.Convolution(h, kernel=(1, 1), stride=(2, 2), num_filter=24, name="proj")
        h = sym.relu(sym.Convolution(h, kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=24, name="c2") + proj)
        h = sym.Pooling(h, global_pool=True, pool_type="avg", kernel=(1, 1), name="gap")
        return sym.FullyConnected(sym.flatten(h), num_hidden=5, name="fc")


def _params(rng):
    f = np.float32
    return {"stem_weight": rng.standard_normal((16, 3, 3, 3)).astype(f) / 5,
            "bn_gamma": rng.uniform(0.5, 1.5, 16).astype(f), "bn_beta": rng.standard_normal(16).astype(f),
            "bn_moving_mean": rng.standard_normal(16).astype(f) * 0.1,
            "bn_moving_var": rng.uniform(0.5, 2, 16).astype(f),
            "proj_weight": rng.standard_normal((24, 16, 1, 1)).astype(f) / 4, "proj_bias": rng.standard_normal(24).astype(f),
            "c2_weight": rng.standard_normal((24, 16, 3, 3)).astype(f) / 12, "c2_bias": rng.standard_normal(24).astype(f),
            "fc_weight": rng.standard_normal((5, 24)).astype(f), "fc_bias": rng.standard_normal(5).astype(f)}


def _conv(x, w, b, s, p):
    """float64 cross-correlation of x (N, C, H, W) with w (O, C, KH, KW), stride s, pad p."""
    xp = np.pad(x, [(0, 0), (0, 0), (p, p), (p, p)])
    kh, kw = w.shape[2:]
    oh, ow = (xp.shape[2] - kh) // s + 1, (xp.shape[3] - kw) // s + 1
    out = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + (oh - 1) * s + 1:s, j:j + (ow - 1) * s + 1:s], w[:, :, i, j])
              for i in range(kh) for j in range(kw))
    return out + (0 if b is None else b[None, :, None, None])


def _ref(p, x):
    p = {k: v.astype(np.float64) for k, v in p.items()}
    h = _conv(x.astype(np.float64), p["stem_weight"], None, 2, 1)
    sc = p["bn_gamma"] / np.sqrt(p["bn_moving_var"] + 1e-3)   # MXNet's BatchNorm eps default
    h = np.maximum(h * sc[None, :, None, None] + (p["bn_beta"] - p["bn_moving_mean"] * sc)[None, :, None, None], 0)
    h = np.maximum(_conv(h, p["c2_weight"], p["c2_bias"], 2, 1) + _conv(h, p["proj_weight"], p["proj_bias"], 2, 0), 0)
    return h.mean(axis=(2, 3)) @ p["fc_weight"].T + p["fc_bias"]


@needs_gcc
def test_network_on_the_direct_path_matches_numpy(rng, tmp_path):
    p1, p2 = _params(rng), _params(rng)
    x = rng.standard_normal((3, 3, 29, 35)).astype(np.float32)
    mod = mxcc.compile(_net(), {"data": x.shape}, p1, out_dir=tmp_path, name="net")
    src = (tmp_path / "net.c").read_text()
    assert src.count("mxcc_conv_direct_f32(") == 3   # stem, c2 (16 channels, stride 2) and the 1x1 stride-2 proj
    assert "mxcc_conv_direct_pack_f32(" in src
    mod.set_num_threads(1)
    one = mod.forward(data=x)[0].copy()
    assert rel_err(one, _ref(p1, x)) <= 1e-5
    mod.set_num_threads(2)
    np.testing.assert_array_equal(mod.forward(data=x)[0], one)
    mod.set_params(p2)
    assert rel_err(mod.forward(data=x)[0], _ref(p2, x)) <= 1e-5
